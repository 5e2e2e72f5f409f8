// The RWKV-7 kernels with AVX2 + FMA (kernels/rwkv_kernels.h, which gives the
// arithmetic each must equal bit for bit).
// WKV-7: S % 16 == 0; the 16 lanes of a row are two ymm (lanes 0-7, 8-15)
// per 16 keys; rows i two at a time (eight accumulators in flight); a row's
// lanes reduced by the pairwise tree (the two ymm, then 128-bit halves, then
// within 128 bits).
// exp / sigmoid: llama_order::expf_avx512 on 8 lanes: its FMAs, and
// vscalefps's j * 2^n as (j * 2^a) * 2^(n - a), a = trunc(n / 2) (the scalar
// form's scale_pow2), 0 / inf where |n| > 192; the tail through a buffer.
// LERP: 8 channels at a time, a multiply and an add per mix (no FMA).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/rwkv_kernels.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

float sum16(__m256 lo, __m256 hi) {
  const __m256 q8 = _mm256_add_ps(lo, hi);
  const __m128 q4 = _mm_add_ps(_mm256_castps256_ps128(q8), _mm256_extractf128_ps(q8, 1));
  const __m128 q2 = _mm_add_ps(q4, _mm_movehl_ps(q4, q4));
  const __m128 q1 = _mm_add_ss(q2, _mm_shuffle_ps(q2, q2, 1));
  return _mm_cvtss_f32(q1);
}

void wkv7_head(float* st, const float* r, const float* w, const float* k, const float* v, const float* a,
               const float* b, float* y, int64_t S) {
  constexpr int kRows = 2;  // S % 16 == 0, so whole pairs of rows
  for (int64_t i = 0; i < S; i += kRows) {
    float* row[kRows];
    for (int q = 0; q < kRows; ++q) row[q] = st + (i + q) * S;
    __m256 pa[kRows][2];
    for (int q = 0; q < kRows; ++q) pa[q][0] = pa[q][1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < S; j += 16)
      for (int h = 0; h < 2; ++h) {
        const __m256 aj = _mm256_loadu_ps(a + j + 8 * h);
        for (int q = 0; q < kRows; ++q) pa[q][h] = _mm256_fmadd_ps(aj, _mm256_loadu_ps(row[q] + j + 8 * h), pa[q][h]);
      }
    __m256 sa[kRows], vi[kRows], py[kRows][2];
    for (int q = 0; q < kRows; ++q) {
      sa[q] = _mm256_set1_ps(sum16(pa[q][0], pa[q][1]));
      vi[q] = _mm256_set1_ps(v[i + q]);
      py[q][0] = py[q][1] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < S; j += 16)
      for (int h = 0; h < 2; ++h) {
        const int64_t o = j + 8 * h;
        const __m256 wj = _mm256_loadu_ps(w + o), kj = _mm256_loadu_ps(k + o), bj = _mm256_loadu_ps(b + o),
                     rj = _mm256_loadu_ps(r + o);
        for (int q = 0; q < kRows; ++q) {
          const __m256 s =
              _mm256_fmadd_ps(sa[q], bj, _mm256_fmadd_ps(vi[q], kj, _mm256_mul_ps(_mm256_loadu_ps(row[q] + o), wj)));
          _mm256_storeu_ps(row[q] + o, s);
          py[q][h] = _mm256_fmadd_ps(s, rj, py[q][h]);
        }
      }
    for (int q = 0; q < kRows; ++q) y[i + q] = sum16(py[q][0], py[q][1]);
  }
}

template <bool kSigmoid>
__m256 apply(__m256 x) {
  if constexpr (kSigmoid) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, expf8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
  } else {
    return expf8(x);
  }
}

template <bool kSigmoid>
void row(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, apply<kSigmoid>(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  float buf[8] = {};
  std::memcpy(buf, x + i, size_t(n - i) * sizeof(float));
  _mm256_storeu_ps(buf, apply<kSigmoid>(_mm256_loadu_ps(buf)));
  std::memcpy(y + i, buf, size_t(n - i) * sizeof(float));
}

void exp_row(const float* x, float* y, int64_t n) { row<false>(x, y, n); }
void sigmoid_row(const float* x, float* y, int64_t n) { row<true>(x, y, n); }

// LERP: 8 channels at a time, p - x once, then a separate multiply and add per mix (no FMA); the last
// C % 8 channels through the scalar form, which rounds the same way.
// GCC writes the intrinsics' multiply and add as plain vector arithmetic, which -ffp-contract=fast would fuse.
__attribute__((optimize("fp-contract=off"))) void lerp(const float* x, const float* p, const float* mix, int64_t n_mix,
                                                       float* y, int64_t y_stride, int64_t C) {
  const int64_t C8 = C & ~int64_t(7);
  for (int64_t j = 0; j < C8; j += 8) {
    const __m256 xj = _mm256_loadu_ps(x + j);
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p + j), xj);
    for (int64_t i = 0; i < n_mix; ++i) {
      const __m256 dm = _mm256_mul_ps(d, _mm256_loadu_ps(mix + i * C + j));
      _mm256_storeu_ps(y + i * y_stride + j, _mm256_add_ps(dm, xj));
    }
  }
  if (C8 == C) return;
  for (int64_t i = 0; i < n_mix; ++i)
    rwkv_ref::lerp(x + C8, p + C8, mix + i * C + C8, 1, y + i * y_stride + C8, 0, C - C8);
}

}  // namespace

const RwkvKernels kRwkvKernels = {"avx2", wkv7_head, exp_row, sigmoid_row, lerp};

}  // namespace opal::cpu::avx2
#endif  // x86
