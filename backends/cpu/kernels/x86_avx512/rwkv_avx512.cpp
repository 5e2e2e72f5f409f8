// The RWKV-7 kernels with AVX-512 (kernels/rwkv_kernels.h, which gives the
// arithmetic each must equal bit for bit).
// WKV-7: S % 16 == 0; the 16 lanes of a row are one zmm per 16 keys; rows i
// are taken four at a time (a, b, w, k, r loaded once per four rows, four
// independent accumulator chains), each row's lanes reduced by the pairwise
// tree (256-bit halves, 128-bit halves, then within 128 bits).
// exp / sigmoid: llama_order::expf_avx512 on 16 lanes (its FMAs, vscalefps),
// the tail under a mask.
// LERP: 16 channels at a time, p - x once, then a separate multiply and add
// per mix (no FMA), the tail under a mask.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/rwkv_kernels.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

float sum16(__m512 p) {
  const __m256 q8 = _mm256_add_ps(_mm512_castps512_ps256(p), _mm512_extractf32x8_ps(p, 1));
  const __m128 q4 = _mm_add_ps(_mm256_castps256_ps128(q8), _mm256_extractf128_ps(q8, 1));
  const __m128 q2 = _mm_add_ps(q4, _mm_movehl_ps(q4, q4));
  const __m128 q1 = _mm_add_ss(q2, _mm_shuffle_ps(q2, q2, 1));
  return _mm_cvtss_f32(q1);
}

void wkv7_head(float* st, const float* r, const float* w, const float* k, const float* v, const float* a,
               const float* b, float* y, int64_t S) {
  constexpr int kRows = 4;  // S % 16 == 0, so whole groups of rows
  for (int64_t i = 0; i < S; i += kRows) {
    float* row[kRows];
    for (int q = 0; q < kRows; ++q) row[q] = st + (i + q) * S;
    __m512 pa[kRows];
    for (int q = 0; q < kRows; ++q) pa[q] = _mm512_setzero_ps();
    for (int64_t j = 0; j < S; j += 16) {
      const __m512 aj = _mm512_loadu_ps(a + j);
      for (int q = 0; q < kRows; ++q) pa[q] = _mm512_fmadd_ps(aj, _mm512_loadu_ps(row[q] + j), pa[q]);
    }
    __m512 sa[kRows], vi[kRows], py[kRows];
    for (int q = 0; q < kRows; ++q) {
      sa[q] = _mm512_set1_ps(sum16(pa[q]));
      vi[q] = _mm512_set1_ps(v[i + q]);
      py[q] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < S; j += 16) {
      const __m512 wj = _mm512_loadu_ps(w + j), kj = _mm512_loadu_ps(k + j), bj = _mm512_loadu_ps(b + j),
                   rj = _mm512_loadu_ps(r + j);
      for (int q = 0; q < kRows; ++q) {
        const __m512 s =
            _mm512_fmadd_ps(sa[q], bj, _mm512_fmadd_ps(vi[q], kj, _mm512_mul_ps(_mm512_loadu_ps(row[q] + j), wj)));
        _mm512_storeu_ps(row[q] + j, s);
        py[q] = _mm512_fmadd_ps(s, rj, py[q]);
      }
    }
    for (int q = 0; q < kRows; ++q) y[i + q] = sum16(py[q]);
  }
}

// llama_order::expf_avx512 on 16 lanes (attn_avx512.cpp's expf16, repeated here to keep each file's
// helpers in its own unnamed namespace).
__m512 expf16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  if (!big) return res;
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                          _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(big, res, alt);
}

__mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

void exp_row(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, expf16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void sigmoid_row(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, x + i)));
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
}

// GCC writes the intrinsics' multiply and add as plain vector arithmetic, which -ffp-contract=fast would fuse.
__attribute__((optimize("fp-contract=off"))) void lerp(const float* x, const float* p, const float* mix, int64_t n_mix,
                                                       float* y, int64_t y_stride, int64_t C) {
  for (int64_t j = 0; j < C; j += 16) {
    const __mmask16 m = tail_mask(C - j);
    const __m512 xj = _mm512_maskz_loadu_ps(m, x + j);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), xj);
    for (int64_t i = 0; i < n_mix; ++i) {
      const __m512 dm = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, mix + i * C + j));
      _mm512_mask_storeu_ps(y + i * y_stride + j, m, _mm512_add_ps(dm, xj));
    }
  }
}

}  // namespace

const RwkvKernels kRwkvKernels = {"avx512", wkv7_head, exp_row, sigmoid_row, lerp};

}  // namespace opal::cpu::avx512
#endif  // x86
