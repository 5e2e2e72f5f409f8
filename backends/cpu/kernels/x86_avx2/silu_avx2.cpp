// SILU and SWIGLU rows with AVX2 + FMA (kernels/silu_kernels.h), 8 lanes:
// silu(x) = x / (1 + e), e = expf8(0 - x) (simd_avx2.h: llama_order::expf_avx512
// per lane, the same bits), over the row's whole 16-element chunks; the n % 16
// tail through llama_order::silu_libm, as the scalar form.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/silu_kernels.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

inline __m256 silu8(__m256 x) {
  const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void silu_row(const float* x, float* y, int64_t n) {
  const int64_t body = n & ~int64_t(15);
  for (int64_t i = 0; i < body; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
  for (int64_t i = body; i < n; ++i) y[i] = llama_order::silu_libm(x[i]);
}

void swiglu_row(const float* g, const float* u, float* y, int64_t n) {
  const int64_t body = n & ~int64_t(15);
  for (int64_t i = 0; i < body; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
  for (int64_t i = body; i < n; ++i) y[i] = llama_order::silu_libm(g[i]) * u[i];
}

}  // namespace

const SiluKernels kSiluKernels = {"avx2", silu_row, swiglu_row};

}  // namespace opal::cpu::avx2
#endif
