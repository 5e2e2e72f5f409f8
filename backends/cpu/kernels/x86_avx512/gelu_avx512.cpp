// GELU and GEGLU rows with AVX-512 (kernels/gelu_kernels.h), 16 lanes:
// vcvtps2ph (nearest even) gives the f16 codes, vpmovzxwd widens them to
// indices, vgatherdps reads the f32 table; x >= 10 takes x, x <= -10 gives 0
// (ordered compares into masks, so NaN reads the table as the scalar form
// does). The tail uses masked loads, gathers and stores.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/gelu_kernels.h"

namespace opal::cpu::avx512 {
namespace {

// gelu of the lanes in m (x <= -10 lanes zero); other lanes zero.
inline __m512 gelu16(const float* table, __m512 x, __mmask16 m) {
  // the maskz forms: g++ 12 warns of the undefined source the unmasked ones start from
  const __m256i h = _mm512_maskz_cvtps_ph(m, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 lo = _mm512_mask_cmp_ps_mask(m, x, _mm512_set1_ps(-10.0f), _CMP_LE_OQ);
  const __mmask16 hi = _mm512_mask_cmp_ps_mask(m, x, _mm512_set1_ps(10.0f), _CMP_GE_OQ);
  const __mmask16 look = __mmask16(m & ~lo & ~hi);
  const __m512 t = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), look, _mm512_maskz_cvtepu16_epi32(m, h), table, 4);
  return _mm512_mask_mov_ps(t, hi, x);
}

void gelu_row(const float* table, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(table, _mm512_loadu_ps(x + i), 0xffff));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, gelu16(table, _mm512_maskz_loadu_ps(m, x + i), m));
  }
}

inline __m512 geglu16(const float* table, __m512 g, __m512 u, __mmask16 m) {
  const __mmask16 lo = _mm512_mask_cmp_ps_mask(m, g, _mm512_set1_ps(-10.0f), _CMP_LE_OQ);
  return _mm512_maskz_mul_ps(__mmask16(m & ~lo), gelu16(table, g, m), u);
}

void geglu_row(const float* table, const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, geglu16(table, _mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i), 0xffff));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m,
                          geglu16(table, _mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i), m));
  }
}

}  // namespace

const GeluKernels kGeluKernels = {"avx512", gelu_row, geglu_row};

}  // namespace opal::cpu::avx512
#endif
