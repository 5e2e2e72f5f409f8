// f16 KV-cache dot products and axpy for attention with AVX-512 (vcvtph2ps),
// in llama.cpp's summation orders (kernels/ref/llama_order.h): one 16-lane
// FMA accumulator (tinyBLAS), or four over steps of 64 with a double tail
// (ggml_vec_dot_f16). _mm512_reduce_add_ps is the reduce_add16 tree.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

__mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

__m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

float dot_f16_lanes16(const uint16_t* k, const float* q, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(load16(k + i), _mm512_loadu_ps(q + i), acc);
  return _mm512_reduce_add_ps(acc);
}

float dot_f16_vec(const uint16_t* k, const float* q, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < np; i += 64) {
    a0 = _mm512_fmadd_ps(load16(k + i), _mm512_loadu_ps(q + i), a0);
    a1 = _mm512_fmadd_ps(load16(k + i + 16), _mm512_loadu_ps(q + i + 16), a1);
    a2 = _mm512_fmadd_ps(load16(k + i + 32), _mm512_loadu_ps(q + i + 32), a2);
    a3 = _mm512_fmadd_ps(load16(k + i + 48), _mm512_loadu_ps(q + i + 48), a3);
  }
  double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (int64_t i = np; i < n; ++i) s += double(_cvtsh_ss(k[i]) * q[i]);
  return float(s);
}

void axpy_f16(float p, const uint16_t* v, float* acc, int64_t n) {
  const __m512 pv = _mm512_set1_ps(p);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, v + i));
    _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(x, pv, _mm512_maskz_loadu_ps(m, acc + i)));
  }
}

}  // namespace

const AttnKernels kAttnKernels = {"avx512", dot_f16_lanes16, dot_f16_vec, axpy_f16};

}  // namespace opal::cpu::avx512
#endif  // x86
