// Element-wise ops on f32 rows: MUL, ADD, DIV (src1 broadcast: each dim of
// src1 divides src0's and index i of src0 reads i % ne1[d]), SCALE, SILU,
// SWIGLU (silu(a) * b), CPY (convert between f32/f16/bf16, any strides).
// Threads split the rows of the output.
// SILU and SWIGLU compute silu as llama.cpp's AVX-512 build does
// (ggml_vec_silu_f32 / ggml_vec_swiglu_f32): ggml_v_silu's polynomial exp on
// each row's whole 16-element chunks, the C library's expf on the tail
// (kernels/llama_order.h); under avx2 / avx2-vnni / avx512 rows go through
// kernels/silu_kernels.h (the same bits, 8 lanes).
// GELU and GEGLU (gelu(a) * b) use the tanh form through llama.cpp's f16
// table (ggml_vec_gelu_f32 / ggml_vec_geglu_f32 with GGML_GELU_FP16, the
// default): for -10 < x < 10 the input is rounded to f16 and the result is
// the f16 rounding of 0.5 x (1 + tanhf(sqrt(2/pi) x (1 + 0.044715 x^2)))
// computed in f32; x <= -10 gives 0 and x >= 10 gives x. The table holds the
// 65536 results widened to f32. Under avx2/avx512 whole rows go through
// kernels/gelu_kernels.h, which reads the same table and gives the same bits.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/gelu_kernels.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/silu_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

// Each output row of the thread's split with its src0 row and its src1 row (src1 broadcast per dim):
// f(src0 row, src1 row, output row).
template <typename F>
void each_row_pair(const Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t r0, r1;
    split_range(node.n_rows(), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i1 = r % node.ne[1], i2 = (r / node.ne[1]) % node.ne[2], i3 = r / (node.ne[1] * node.ne[2]);
      f(reinterpret_cast<const float*>(row_ptr(a, i1, i2, i3)),
        reinterpret_cast<const float*>(row_ptr(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3])),
        reinterpret_cast<float*>(row_ptr(node, i1, i2, i3)));
    }
  });
}

// Each output row of the thread's split with its src0 row: f(src0 row, output row).
template <typename F>
void each_row(const Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t r0, r1;
    split_range(node.n_rows(), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      f(reinterpret_cast<const float*>(row_ptr_flat(a, r)), reinterpret_cast<float*>(row_ptr_flat(node, r)));
  });
}

template <typename F>
void binary(const Tensor& node, const OpContext& ctx, F f) {
  const int64_t n0 = node.ne[0], nb0 = node.src[1]->ne[0];
  each_row_pair(node, ctx, [&](const float* pa, const float* pb, float* po) {
    if (nb0 == n0) {
      for (int64_t i = 0; i < n0; ++i) po[i] = f(pa[i], pb[i], i, n0);
    } else {
      for (int64_t i = 0; i < n0; ++i) po[i] = f(pa[i], pb[i % nb0], i, n0);
    }
  });
}

template <typename F>
void unary(const Tensor& node, const OpContext& ctx, F f) {
  const int64_t n0 = node.ne[0];
  each_row(node, ctx, [&](const float* pa, float* po) {
    for (int64_t i = 0; i < n0; ++i) po[i] = f(pa[i], i, n0);
  });
}

void cpy(const Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t r0, r1;
    split_range(node.n_rows(), ith, nth, &r0, &r1);
    float tmp[256];
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* pa = row_ptr_flat(a, r);
      uint8_t* po = row_ptr_flat(node, r);
      for (int64_t i = 0; i < node.ne[0]; i += 256) {
        const int64_t n = std::min<int64_t>(256, node.ne[0] - i);
        if (a.nb[0] == uint64_t(type_size(a.type))) {
          row_to_f32(a.type, pa + i * a.nb[0], tmp, n);
        } else {
          for (int64_t j = 0; j < n; ++j) row_to_f32(a.type, pa + (i + j) * a.nb[0], tmp + j, 1);
        }
        row_from_f32(node.type, tmp, po + i * node.nb[0], n);
      }
    }
  });
}

// GELU rows through the ISA's kernel (kernels/gelu_kernels.h).
void gelu_rows(const Tensor& node, const OpContext& ctx, const GeluKernels& k) {
  const float* table = gelu_table();
  each_row(node, ctx, [&](const float* x, float* y) { k.gelu_row(table, x, y, node.ne[0]); });
}

// GEGLU rows through the ISA's kernel; src1's rows as long as the output's.
void geglu_rows(const Tensor& node, const OpContext& ctx, const GeluKernels& k) {
  const float* table = gelu_table();
  each_row_pair(node, ctx, [&](const float* g, const float* u, float* y) { k.geglu_row(table, g, u, y, node.ne[0]); });
}

// SILU rows through the ISA's kernel (kernels/silu_kernels.h).
void silu_rows(const Tensor& node, const OpContext& ctx, const SiluKernels& k) {
  each_row(node, ctx, [&](const float* x, float* y) { k.silu_row(x, y, node.ne[0]); });
}

// SWIGLU rows through the ISA's kernel; src1's rows as long as the output's.
void swiglu_rows(const Tensor& node, const OpContext& ctx, const SiluKernels& k) {
  each_row_pair(node, ctx, [&](const float* g, const float* u, float* y) { k.swiglu_row(g, u, y, node.ne[0]); });
}

}  // namespace

const float* gelu_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    const float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
    for (uint32_t i = 0; i < 65536; ++i) {
      const float v = f16_to_f32(uint16_t(i));
      t[i] = f16_to_f32(f32_to_f16(0.5f * v * (1.0f + tanhf(kSqrt2OverPi * v * (1.0f + kCoefA * v * v)))));
    }
    return t;
  }();
  return table.data();
}

float gelu_ref(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return gelu_table()[f32_to_f16(x)];
}

float geglu_ref(float g, float u) {
  // ggml_vec_geglu_f32: x >= 10 multiplies x itself, below -10 the product is 0
  return g <= -10.0f ? 0.0f : gelu_ref(g) * u;
}

void compute_elementwise(const Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::Mul: binary(node, ctx, [](float x, float y, int64_t, int64_t) { return x * y; }); return;
    case Op::Add: binary(node, ctx, [](float x, float y, int64_t, int64_t) { return x + y; }); return;
    case Op::Div: binary(node, ctx, [](float x, float y, int64_t, int64_t) { return x / y; }); return;
    case Op::Swiglu:
      if (const SiluKernels* k = silu_kernels(); k && node.src[1]->ne[0] == node.ne[0]) {
        swiglu_rows(node, ctx, *k);
      } else {
        binary(node, ctx, [](float g, float u, int64_t i, int64_t n) { return llama_order::silu_at(g, i, n) * u; });
      }
      return;
    case Op::Scale: {
      const float s = node.fparams[0];
      unary(node, ctx, [s](float x, int64_t, int64_t) { return x * s; });
      return;
    }
    case Op::Silu:
      if (const SiluKernels* k = silu_kernels()) {
        silu_rows(node, ctx, *k);
      } else {
        unary(node, ctx, [](float x, int64_t i, int64_t n) { return llama_order::silu_at(x, i, n); });
      }
      return;
    case Op::Gelu:
      if (const GeluKernels* k = gelu_kernels()) {
        gelu_rows(node, ctx, *k);
      } else {
        unary(node, ctx, [](float x, int64_t, int64_t) { return gelu_ref(x); });
      }
      return;
    case Op::Geglu:
      if (const GeluKernels* k = gelu_kernels(); k && node.src[1]->ne[0] == node.ne[0]) {
        geglu_rows(node, ctx, *k);
      } else {
        binary(node, ctx, [](float g, float u, int64_t, int64_t) { return geglu_ref(g, u); });
      }
      return;
    case Op::Cpy: cpy(node, ctx); return;
    default: break;
  }
}

}  // namespace opal::cpu
