// f16 KV-cache dot products and axpy for attention with AVX2 + F16C, in
// llama.cpp's AVX-512 summation orders (kernels/llama_order.h): each
// 16-lane accumulator is a pair of 8-lane registers (lanes 0-7, 8-15), and the
// final reduction follows reduce_add16 exactly, so results equal the AVX-512
// and scalar forms bit for bit.
#if defined(__x86_64__) || defined(__i386__)
#include <cmath>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// reduce_add16 of the 16 lanes (lo = lanes 0-7, hi = lanes 8-15).
float reduce16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);                                         // t[i] = a[i] + a[i+8]
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // u[i] = t[i] + t[i+4]
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));                                         // u0+u2, u1+u3
  u = _mm_add_ss(u, _mm_movehdup_ps(u));
  return _mm_cvtss_f32(u);
}

float dot_f16_lanes16(const uint16_t* k, const float* q, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    lo = _mm256_fmadd_ps(load8(k + i), _mm256_loadu_ps(q + i), lo);
    hi = _mm256_fmadd_ps(load8(k + i + 8), _mm256_loadu_ps(q + i + 8), hi);
  }
  return reduce16(lo, hi);
}

float dot_f16_vec(const uint16_t* k, const float* q, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  __m256 a[8];
  for (auto& r : a) r = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(load8(k + i + 8 * j), _mm256_loadu_ps(q + i + 8 * j), a[j]);
  // 16-lane accumulator j is (a[2j], a[2j+1]); combine (0 + 2) + (1 + 3).
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
  double s = reduce16(lo, hi);
  for (int64_t i = np; i < n; ++i) s += double(_cvtsh_ss(k[i]) * q[i]);
  return float(s);
}

void axpy_f16(float p, const uint16_t* v, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load8(v + i), pv, _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] = std::fma(_cvtsh_ss(v[i]), p, acc[i]);
}

}  // namespace

const AttnKernels kAttnKernels = {"avx2",  dot_f16_lanes16, dot_f16_vec, axpy_f16, nullptr, nullptr, nullptr,
                                  nullptr, nullptr,         nullptr,     nullptr,  nullptr, nullptr, nullptr};

}  // namespace opal::cpu::avx2
#endif  // x86
