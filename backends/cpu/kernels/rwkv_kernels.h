// Vector kernels for the RWKV-7 ops (ops/rwkv.cpp), per ISA, with the scalar
// forms they must equal bit for bit (the ISA never changes a result).
//
// WKV-7, one token of one head (graph/graph.h, Wkv7Src), S % 16 == 0: the
// state St is row-major S x S (i the value index, j the key index). For each
// row i, in 16 lanes (lane l takes j = l mod 16), each lane rounding as
// written here (fma = one rounding):
//   pa[l] = fma(a_j, St[i][j], pa[l])                     over j, from 0
//   sa    = pairwise sum of pa (lanes l + 8, then l + 4, l + 2, l + 1)
//   St[i][j] = fma(sa, b_j, fma(v_i, k_j, St[i][j] * w_j))
//   py[l] = fma(St[i][j], r_j, py[l])                     over j, from 0
//   y_i   = pairwise sum of py
// The SIMD forms keep four rows i in flight so that the reductions overlap.
//
// exp and sigmoid: llama_order::expf_avx512 (ggml_v_expf's polynomial, about
// 1 ulp) on every element and every ISA; sigmoid(x) = 1 / (1 + exp(-x)).
//
// LERP (one token's token-shift mixes): d_j = p_j - x_j once, then for each
// mix i: y_i[j] = (d_j * mix_i[j]) + x_j, the multiply and the add rounded
// apart (never one fused multiply-add), as the SUB, MUL and ADD nodes it
// replaces round. x and p are read once for all n mixes.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels/llama_order.h"

namespace opal::cpu {

struct RwkvKernels {
  const char* name;
  // The WKV-7 update of one head for one token (above): st [S x S] in place, y [S].
  void (*wkv7_head)(float* st, const float* r, const float* w, const float* k, const float* v, const float* a,
                    const float* b, float* y, int64_t S);
  void (*exp_row)(const float* x, float* y, int64_t n);
  void (*sigmoid_row)(const float* x, float* y, int64_t n);
  // LERP of one token (above): mix i at mix + i * C, its output at y + i * y_stride.
  void (*lerp)(const float* x, const float* p, const float* mix, int64_t n_mix, float* y, int64_t y_stride, int64_t C);
};

// The selected ISA's kernels (avx512, avx2), or null under scalar (use the forms below).
const RwkvKernels* rwkv_kernels();

namespace avx2 {
extern const RwkvKernels kRwkvKernels;
}
namespace avx512 {
extern const RwkvKernels kRwkvKernels;
}

namespace rwkv_ref {

inline float exp1(float x) { return llama_order::expf_avx512(x); }
inline float sigmoid1(float x) { return 1.0f / (1.0f + llama_order::expf_avx512(0.0f - x)); }

// The pairwise sum of 16 lanes: (l, l + 8), then (l, l + 4), (l, l + 2), (l, l + 1).
inline float sum_lanes16(const float* p) {
  float q[8];
  for (int l = 0; l < 8; ++l) q[l] = p[l] + p[l + 8];
  for (int w = 4; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) q[l] += q[l + w];
  return q[0];
}

// The scalar form of RwkvKernels::wkv7_head (S % 16 == 0).
inline void wkv7_head(float* st, const float* r, const float* w, const float* k, const float* v, const float* a,
                      const float* b, float* y, int64_t S) {
  for (int64_t i = 0; i < S; ++i) {
    float* row = st + i * S;
    float pa[16] = {}, py[16] = {};
    for (int64_t j = 0; j < S; j += 16)
      for (int l = 0; l < 16; ++l) pa[l] = std::fma(a[j + l], row[j + l], pa[l]);
    const float sa = sum_lanes16(pa);
    for (int64_t j = 0; j < S; j += 16)
      for (int l = 0; l < 16; ++l) {
        const float s = std::fma(sa, b[j + l], std::fma(v[i], k[j + l], row[j + l] * w[j + l]));
        row[j + l] = s;
        py[l] = std::fma(s, r[j + l], py[l]);
      }
    y[i] = sum_lanes16(py);
  }
}

// The scalar form of RwkvKernels::lerp. Built without floating-point
// contraction (a compiler that fused d * m + x into one FMA would round once
// where the op rounds twice).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
inline void
lerp(const float* x, const float* p, const float* mix, int64_t n_mix, float* y, int64_t y_stride, int64_t C) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  for (int64_t i = 0; i < n_mix; ++i) {
    const float* m = mix + i * C;
    float* yi = y + i * y_stride;
    for (int64_t j = 0; j < C; ++j) {
      const float d = p[j] - x[j];
      const float dm = d * m[j];
      yi[j] = dm + x[j];
    }
  }
}

}  // namespace rwkv_ref
}  // namespace opal::cpu
