// Reference matmul kernels: for each weight row of the slice, dequantize the
// row once into scratch, then take its dot product with every activation row
// (already rounded through the vec_dot type and stored as f32). Dot products
// accumulate in double, like ggml's scalar f32 path (ggml_float).
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernel_tables.h"
#include "core/quant.h"
#include "core/quant/activation.h"

namespace opal::cpu {
namespace {

uint64_t ref_act_row_bytes(int64_t k) { return uint64_t(k) * sizeof(float); }

void ref_convert_act(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  round_activations(act_type, x, reinterpret_cast<float*>(dst), k);
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

template <DType W>
void ref_gemm_t(const GemmArgs& a) { ref_gemm(W, a); }

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
    make_ref<DType::F32>(),  make_ref<DType::F16>(),  make_ref<DType::BF16>(),  make_ref<DType::Q4_0>(),
    make_ref<DType::Q4_1>(), make_ref<DType::Q5_0>(), make_ref<DType::Q5_1>(),  make_ref<DType::Q8_0>(),
    make_ref<DType::Q2_K>(), make_ref<DType::Q3_K>(), make_ref<DType::Q4_K>(),  make_ref<DType::Q5_K>(),
    make_ref<DType::Q6_K>(), make_ref<DType::IQ4_NL>(), make_ref<DType::IQ4_XS>(),
};

}  // namespace

DType activation_type_for(DType w) {
  switch (w) {
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::IQ4_NL: return DType::Q8_0;
    case DType::Q4_1: case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::IQ4_XS: return DType::Q8_K;
    default: return DType::F32;
  }
}

void round_activations(DType act_type, const float* x, float* out, int64_t k) {
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

const MatmulKernels* ref_matmul_kernels(DType weight_type) {
  for (const auto& k : kRefTable)
    if (k.weight_type == weight_type) {
      if (!is_float_type(weight_type) && !can_dequantize(weight_type)) return nullptr;
      return &k;
    }
  return nullptr;
}

}  // namespace opal::cpu
