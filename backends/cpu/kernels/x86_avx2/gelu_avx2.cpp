// GELU and GEGLU rows with AVX2 + F16C (kernels/gelu_kernels.h), 8 lanes:
// vcvtps2ph (nearest even) gives the f16 codes, vpmovzxwd widens them to
// indices, vgatherdps reads the f32 table; x >= 10 takes x, x <= -10 gives 0
// (ordered compares, so NaN reads the table as the scalar form does). The
// tail of fewer than 8 elements runs the same steps on a padded copy.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/gelu_kernels.h"

namespace opal::cpu::avx2 {
namespace {

// gelu of 8 lanes, before the x <= -10 zeroing.
inline __m256 gelu_table8(const float* table, __m256 x) {
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 t = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4);
  return _mm256_blendv_ps(t, x, _mm256_cmp_ps(x, _mm256_set1_ps(10.0f), _CMP_GE_OQ));
}

inline __m256 below_min(__m256 x) { return _mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LE_OQ); }

void gelu_row(const float* table, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_andnot_ps(below_min(v), gelu_table8(table, v)));
  }
  if (i < n) {
    float xb[8] = {}, yb[8];
    std::memcpy(xb, x + i, size_t(n - i) * 4);
    const __m256 v = _mm256_loadu_ps(xb);
    _mm256_storeu_ps(yb, _mm256_andnot_ps(below_min(v), gelu_table8(table, v)));
    std::memcpy(y + i, yb, size_t(n - i) * 4);
  }
}

void geglu_row(const float* table, const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(g + i);
    const __m256 r = _mm256_mul_ps(gelu_table8(table, v), _mm256_loadu_ps(u + i));
    _mm256_storeu_ps(y + i, _mm256_andnot_ps(below_min(v), r));
  }
  if (i < n) {
    float gb[8] = {}, ub[8] = {}, yb[8];
    std::memcpy(gb, g + i, size_t(n - i) * 4);
    std::memcpy(ub, u + i, size_t(n - i) * 4);
    const __m256 v = _mm256_loadu_ps(gb);
    const __m256 r = _mm256_mul_ps(gelu_table8(table, v), _mm256_loadu_ps(ub));
    _mm256_storeu_ps(yb, _mm256_andnot_ps(below_min(v), r));
    std::memcpy(y + i, yb, size_t(n - i) * 4);
  }
}

}  // namespace

const GeluKernels kGeluKernels = {"avx2", gelu_row, geglu_row};

}  // namespace opal::cpu::avx2
#endif
