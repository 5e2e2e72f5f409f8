// Reference matmul kernels. The activations are kept as f32 values already
// rounded through the vec_dot type (ref_round_activations), so results carry the
// same activation rounding as llama.cpp's.
//
// Summation orders, so that the reference gives llama.cpp's results bit for
// bit where its arithmetic is known (kernels/llama_order.h,
// docs/fidelity.md); the SIMD kernels use the same orders:
//   F32 / F16: tinyBLAS (one 16-lane FMA accumulator) for >= 2 activation
//     rows and k % 16 == 0, else ggml_vec_dot_f32 / _f16 (4 x 16 lanes over
//     steps of 64, then the tail in float / double).
//   Q8_0 / Q5_0 weights (Q8_0 activations): llama.cpp's x86 vec_dot and
//     tinyBLAS_Q0: per 32-block, 8 integer lanes of 4 products each,
//     acc[l] = fma(d_w * d_x, lane[l], acc[l]), then hsum8 (the order of the
//     SIMD kernels too).
//   Q4_0: llama.cpp repacks Q4_0 on x86; its gemm/gemv sum each block
//     exactly, then acc = fma(float(isum), d_w * d_x, acc) block by block
//     (llama_order::block_exact), at every batch size.
//   Other types: dequantize the weight row once into scratch, then dot
//     products accumulated in double (ggml's scalar ggml_float).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernel_tables.h"
#include "backends/cpu/kernels/llama_order.h"
#include "core/quant.h"
#include "core/quant/activation.h"
#include "core/quant/blocks.h"

namespace opal::cpu {
namespace {

uint64_t ref_act_row_bytes(int64_t k) { return uint64_t(k) * sizeof(float); }

void ref_convert_act(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  ref_round_activations(act_type, x, reinterpret_cast<float*>(dst), k);
}

int64_t ref_scratch_floats(int64_t k) { return k; }

void ref_gemm(DType wt, const GemmArgs& a) {
  float* wrow = a.scratch;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    row_to_f32(wt, a.w + uint64_t(r) * a.w_row_bytes, wrow, a.k);
    for (int64_t t = 0; t < a.n_act; ++t) {
      const float* x = reinterpret_cast<const float*>(a.act + uint64_t(t) * a.act_row_bytes);
      double sum = 0.0;
      for (int64_t i = 0; i < a.k; ++i) sum += double(wrow[i] * x[i]);
      a.out[t * a.out_stride + r] = float(sum);
    }
  }
}

// F32 / F16 weights in llama.cpp's orders (see the top of the file).
void ref_gemm_float(DType wt, const GemmArgs& a) {
  float* wrow = a.scratch;
  const bool batched = a.n_act >= 2 && !a.single_rows;
  const bool lanes16 = batched && a.k % 16 == 0;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    row_to_f32(wt, a.w + uint64_t(r) * a.w_row_bytes, wrow, a.k);
    for (int64_t t = 0; t < a.n_act; ++t) {
      const float* x = reinterpret_cast<const float*>(a.act + uint64_t(t) * a.act_row_bytes);
      if (wt == DType::BF16)
        a.out[t * a.out_stride + r] = batched && a.k % 32 == 0 ? llama_order::dot_bf16_lanes32(wrow, x, a.k)
                                                               : llama_order::dot_vec_bf16(wrow, x, a.k);
      else
        a.out[t * a.out_stride + r] = lanes16            ? llama_order::dot_lanes16(wrow, x, a.k)
                                      : wt == DType::F32 ? llama_order::dot_vec_f32(wrow, x, a.k)
                                                         : llama_order::dot_vec_f16(wrow, x, a.k);
    }
  }
}

// The integers and scale of a 32-block kept as values v[i] = q[i] * d whose
// largest |q| is qmax (llama.cpp's Q8_0 quantizers map the largest |x| to
// 127, the Q4_0 / Q5_0 ones to -8 / -16): max |v| = qmax * d exactly, so d
// and every q[i] follow without rounding.
void block_ints_of(const float* v, float qmax, int8_t* q, float* d) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
  *d = amax / qmax;
  for (int i = 0; i < 32; ++i) q[i] = *d == 0.0f ? int8_t(0) : int8_t(std::lrint(v[i] / *d));
}
void q8_block_of(const float* v, int8_t* q, float* d) { block_ints_of(v, 127.0f, q, d); }

// One block's contribution in llama.cpp's 8-lane order.
void block_lanes(const int8_t* wq, const int8_t* xq, float d, float* acc) {
  for (int l = 0; l < 8; ++l) {
    int32_t lane = 0;
    for (int j = 0; j < 4; ++j) lane += int32_t(wq[4 * l + j]) * int32_t(xq[4 * l + j]);
    acc[l] = std::fma(d, float(lane), acc[l]);
  }
}

// Q8_0 / Q4_0 / Q5_0 weights with Q8_0 activations in llama.cpp's orders.
template <DType W>
void ref_gemm_q8_lanes(const GemmArgs& a) {
  const int64_t nb = a.k / 32;
  int8_t* xq = reinterpret_cast<int8_t*>(a.scratch);                // k ints
  float* xd = reinterpret_cast<float*>(a.scratch) + (a.k + 3) / 4;  // nb scales
  for (int64_t t = 0; t < a.n_act; ++t) {
    const float* x = reinterpret_cast<const float*>(a.act + uint64_t(t) * a.act_row_bytes);
    for (int64_t b = 0; b < nb; ++b) q8_block_of(x + 32 * b, xq + 32 * b, xd + b);
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const uint8_t* wrow = a.w + uint64_t(r) * a.w_row_bytes;
      float acc[8] = {};
      for (int64_t b = 0; b < nb; ++b) {
        int8_t wq[32];
        uint16_t wd;
        if constexpr (W == DType::Q8_0) {
          const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(wrow) + b;
          wd = blk->d;
          std::memcpy(wq, blk->qs, 32);
        } else if constexpr (W == DType::Q4_0) {
          const auto* blk = reinterpret_cast<const quant::BlockQ4_0*>(wrow) + b;
          wd = blk->d;
          for (int j = 0; j < 16; ++j) {
            wq[j] = int8_t((blk->qs[j] & 0x0F) - 8);
            wq[j + 16] = int8_t((blk->qs[j] >> 4) - 8);
          }
        } else {  // Q5_0: 4 low bits in qs, the 5th in qh, offset 16
          const auto* blk = reinterpret_cast<const quant::BlockQ5_0*>(wrow) + b;
          wd = blk->d;
          uint32_t qh;
          std::memcpy(&qh, blk->qh, 4);
          for (int j = 0; j < 16; ++j) {
            wq[j] = int8_t(((blk->qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16);
            wq[j + 16] = int8_t(((blk->qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
          }
        }
        if constexpr (W == DType::Q4_0)
          acc[0] = llama_order::block_exact(wq, xq + 32 * b, f16_to_f32(wd) * xd[b], acc[0]);
        else block_lanes(wq, xq + 32 * b, f16_to_f32(wd) * xd[b], acc);
      }
      a.out[t * a.out_stride + r] = W == DType::Q4_0 ? acc[0] : llama_order::hsum8(acc);
    }
  }
}

template <DType W>
void ref_gemm_t(const GemmArgs& a) {
  if constexpr (W == DType::F32 || W == DType::F16 || W == DType::BF16) ref_gemm_float(W, a);
  else if constexpr (W == DType::Q8_0 || W == DType::Q4_0 || W == DType::Q5_0) ref_gemm_q8_lanes<W>(a);
  else ref_gemm(W, a);
}

template <DType W>
MatmulKernels make_ref() {
  MatmulKernels k;
  k.weight_type = W;
  k.act_type = activation_type_for(W);
  k.name = "ref";
  k.act_row_bytes = ref_act_row_bytes;
  k.convert_act = ref_convert_act;
  k.gemm = ref_gemm_t<W>;
  k.scratch_floats = ref_scratch_floats;
  return k;
}

const MatmulKernels kRefTable[] = {
    make_ref<DType::F32>(),  make_ref<DType::F16>(),    make_ref<DType::BF16>(),   make_ref<DType::Q4_0>(),
    make_ref<DType::Q4_1>(), make_ref<DType::Q5_0>(),   make_ref<DType::Q5_1>(),   make_ref<DType::Q8_0>(),
    make_ref<DType::Q2_K>(), make_ref<DType::Q3_K>(),   make_ref<DType::Q4_K>(),   make_ref<DType::Q5_K>(),
    make_ref<DType::Q6_K>(), make_ref<DType::IQ4_NL>(), make_ref<DType::IQ4_XS>(),
};

}  // namespace

DType activation_type_for(DType w) {
  switch (w) {
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::IQ4_NL: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return DType::Q8_K;
    default: return DType::F32;
  }
}

void ref_round_activations(DType act_type, const float* x, float* out, int64_t k) {
  switch (act_type) {
    case DType::F32: std::memcpy(out, x, size_t(k) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < k; ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < k; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    default: break;
  }
  // Q8_0 / Q8_1 / Q8_K: llama.cpp's activation quantizers (core/quant/activation.h).
  if (is_activation_type(act_type) && k % block_size(act_type) == 0) {
    const int64_t bs = block_size(act_type);
    alignas(64) uint8_t blk[512];
    for (int64_t i = 0; i < k; i += bs) {
      quantize_activation_row(act_type, x + i, blk, bs);
      dequantize_activation_row(act_type, blk, out + i, bs);
    }
    return;
  }
  // Other quantized vec_dot types: quantize then dequantize, a block-sized piece at a time.
  if (!can_quantize(act_type) || !can_dequantize(act_type) || k % block_size(act_type) != 0) {
    std::memcpy(out, x, size_t(k) * 4);  // no reference quantizer: keep f32 activations
    return;
  }
  const int64_t bs = block_size(act_type);
  alignas(64) uint8_t blk[512];
  for (int64_t i = 0; i < k; i += bs) {
    quantize_rows(act_type, x + i, blk, 1, bs);
    dequantize_row(act_type, blk, out + i, bs);
  }
}

float reference_dot(DType weight_type, const float* w, const float* x, int64_t k, bool batched) {
  switch (weight_type) {
    case DType::F32:
    case DType::F16:
      if (batched && k % 16 == 0) return llama_order::dot_lanes16(w, x, k);
      return weight_type == DType::F32 ? llama_order::dot_vec_f32(w, x, k) : llama_order::dot_vec_f16(w, x, k);
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: {
      const float qmax = weight_type == DType::Q8_0 ? 127.0f : weight_type == DType::Q4_0 ? 8.0f : 16.0f;
      float acc[8] = {};
      for (int64_t b = 0; b + 32 <= k; b += 32) {
        int8_t wq[32], xq[32];
        float wd, xd;
        block_ints_of(w + b, qmax, wq, &wd);
        q8_block_of(x + b, xq, &xd);
        if (weight_type == DType::Q4_0) acc[0] = llama_order::block_exact(wq, xq, wd * xd, acc[0]);
        else block_lanes(wq, xq, wd * xd, acc);
      }
      return weight_type == DType::Q4_0 ? acc[0] : llama_order::hsum8(acc);
    }
    default: {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) sum += double(w[i] * x[i]);
      return float(sum);
    }
  }
}

const MatmulKernels* ref_matmul_kernels(DType weight_type) {
  for (const auto& k : kRefTable)
    if (k.weight_type == weight_type) {
      if (!is_float_type(weight_type) && !can_dequantize(weight_type)) return nullptr;
      return &k;
    }
  return nullptr;
}

}  // namespace opal::cpu
