// llama.cpp's float arithmetic, in portable scalar code, so that Opal's
// reference and SIMD paths can reproduce its results bit for bit where that
// matters for fidelity (docs/fidelity.md). Facts taken from ggml-cpu
// (x86, AVX-512 build, gcc):
//
// - reduce_add16: _mm512_reduce_add_ps, the halving tree
//     t[i] = a[i] + a[i+8] (i < 8); u[i] = t[i] + t[i+4] (i < 4);
//     (u[0] + u[2]) + (u[1] + u[3]).
// - hsum8: hsum_float_8 / tinyBLAS hsum(__m256): the same tree on 8 lanes.
// - block_exact: repacked Q4_0 (x86): per block, exact int sum, one FMA.
// - dot_lanes16: tinyBLAS (llamafile sgemm) for f32/f16 operands, used for
//   MUL_MAT with at least 2 activation rows and k % 16 == 0: one 16-lane FMA
//   accumulator walks k in steps of 16, then reduce_add16.
// - dot_vec_f16 / dot_vec_f32: ggml_vec_dot_f16 / _f32 (MUL_MAT with one
//   activation row, or when tinyBLAS declines): 4 accumulators of 16 lanes
//   over steps of 64, combined (a0+a2) + (a1+a3) lane-wise, reduce_add16,
//   then the k % 64 tail one product at a time (in double for f16, in float
//   for f32, see vec_f32_tail).
// Every fused multiply-add is written as std::fma and no other product feeds
// an add directly, so results do not depend on the compiler's contraction
// (-ffp-contract) or optimization level.
// - expf_avx512 / silu_avx512: ggml_v_expf / ggml_v_silu (the AVX-512
//   polynomial used by softmax, SiLU and SwiGLU on 16-lane chunks; the
//   n % 16 tail of a row uses the C library's expf).
//
// Products of two f16 (or bf16) values are exact in f32, so an FMA of such a
// product equals a rounded add of it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

// An unnamed namespace: each including file (compiled with its own ISA
// flags, kernels/isa.h) gets its own copies, never merged by the linker.
namespace opal::cpu::llama_order {
namespace {

inline float reduce_add16(const float* a) {
  float t[8], u[4];
  for (int i = 0; i < 8; ++i) t[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

inline float hsum8(const float* a) {
  float u[4];
  for (int i = 0; i < 4; ++i) u[i] = a[i] + a[i + 4];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

// One 32-element block of a repacked-Q4_0 dot (llama.cpp's q4_0_8x8 gemm and
// gemv on x86): the block's exact integer sum, then one FMA by d = d_w * d_x.
inline float block_exact(const int8_t* wq, const int8_t* xq, float d, float acc) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += int32_t(wq[i]) * int32_t(xq[i]);
  return std::fma(float(sum), d, acc);
}

// x and y hold f32 values; n % 16 == 0.
inline float dot_lanes16(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  return reduce_add16(acc);
}

// The 4 x 16-lane part of ggml_vec_dot_f16/_f32 over the first n & ~63
// elements, reduced: returns the float ggml assigns to its sum before the tail.
inline float dot_vec_head(const float* x, const float* y, int64_t np) {
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) acc[j][l] = std::fma(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
  float t[16];
  for (int l = 0; l < 16; ++l) t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  return reduce_add16(t);
}

inline float dot_vec_f16(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  double s = dot_vec_head(x, y, np);
  for (int64_t i = np; i < n; ++i) s += double(x[i] * y[i]);
  return float(s);
}

// ggml_vec_dot_f32's scalar tail `sumf += x[i]*y[i]` as gcc compiles it for
// AVX-512 (verified on stories260K, whose FFN has k = 172): the loop is
// vectorized as an in-order reduction of 16- and then 8-wide products, so
// the products of the first (m & ~7) elements are rounded before their add,
// and the last m % 8 go through a scalar fused multiply-add.
inline float vec_f32_tail(float s, const float* x, const float* y, int64_t m) {
  const int64_t unfused = m & ~int64_t(7);
  for (int64_t i = 0; i < unfused; ++i) {
    volatile float p = x[i] * y[i];  // rounded product: no contraction into the add
    s += p;
  }
  for (int64_t i = unfused; i < m; ++i) s = std::fma(x[i], y[i], s);
  return s;
}

inline float dot_vec_f32(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  return vec_f32_tail(dot_vec_head(x, y, np), x + np, y + np, n - np);
}

// BF16 with AVX512_BF16 (vdpbf16ps: per 32-bit lane j, acc += odd product,
// then acc += even product, each product exact, each add rounded).
// tinyBLAS for >= 2 activation rows and k % 32 == 0: one 16-lane accumulator
// over steps of 32 elements, then reduce_add16.
inline void dpbf16_step(float* acc, const float* x, const float* y) {
  for (int j = 0; j < 16; ++j) {
    acc[j] = std::fma(x[2 * j + 1], y[2 * j + 1], acc[j]);
    acc[j] = std::fma(x[2 * j], y[2 * j], acc[j]);
  }
}

inline float dot_bf16_lanes32(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 32) dpbf16_step(acc, x + i, y + i);
  return reduce_add16(acc);
}

// ggml_vec_dot_bf16 (AVX512_BF16): two accumulators over steps of 64, each
// reduced and added in double, then the tail in double.
inline float dot_vec_bf16(const float* x, const float* y, int64_t n) {
  float c1[16] = {}, c2[16] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    dpbf16_step(c1, x + i, y + i);
    dpbf16_step(c2, x + i + 32, y + i + 32);
  }
  double s = 0.0;
  s += double(reduce_add16(c1));
  s += double(reduce_add16(c2));
  for (; i < n; ++i) s += double(x[i] * y[i]);
  return float(s);
}

// x * 2^n rounded once, like vscalefps and std::ldexp, for |n| <= 192 and x
// near 1 (a and b = n - a are normal exponents and x * 2^a is exact), without
// ldexp's library call.
inline float pow2(int e) {
  const uint32_t bits = uint32_t(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float scale_pow2(float x, int n) {
  const int a = n / 2;
  return (x * pow2(a)) * pow2(n - a);
}

inline float expf_avx512(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j =
      std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
               std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  if (std::isnan(n)) return n;
  return scale_pow2(j, int(n));  // vscalefps: j * 2^n, n already integral
}

inline float silu_avx512(float x) { return x / (1.0f + expf_avx512(0.0f - x)); }
inline float silu_libm(float x) { return x / (1.0f + std::exp(-x)); }

// ggml_vec_silu_f32 / the SiLU of ggml_vec_swiglu_f32 on a row of n: the
// polynomial on whole 16-lane chunks, the C library's expf on the tail.
inline float silu_at(float x, int64_t i, int64_t n) { return i < (n & ~int64_t(15)) ? silu_avx512(x) : silu_libm(x); }

}  // namespace
}  // namespace opal::cpu::llama_order
