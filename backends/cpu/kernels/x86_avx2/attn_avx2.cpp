// f16 KV-cache dot product and axpy for attention with AVX2 + F16C, f32
// accumulation; the n % 8 tail in scalar.
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

float dot_f16(const uint16_t* k, const float* q, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load8(k + i), _mm256_loadu_ps(q + i), acc0);
    acc1 = _mm256_fmadd_ps(load8(k + i + 8), _mm256_loadu_ps(q + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(k + i), _mm256_loadu_ps(q + i), acc0);
  float s = hsum8(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += _cvtsh_ss(k[i]) * q[i];
  return s;
}

void axpy_f16(float p, const uint16_t* v, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, load8(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += p * _cvtsh_ss(v[i]);
}

}  // namespace

const AttnKernels kAttnKernels = {"avx2", dot_f16, axpy_f16};

}  // namespace opal::cpu::avx2
#endif  // x86
