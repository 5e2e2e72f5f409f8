// reduce16x16: sixteen _mm512_reduce_add_ps at once, in its exact order, for
// kernels that keep one 16-lane accumulator per output (attention's dots,
// the F32/F16 tinyBLAS tiles). Everything in an unnamed namespace (see
// docs/cpu-kernels.md: helpers compiled with one ISA's flags).
#pragma once
#include <immintrin.h>

namespace opal::cpu::avx512 {
namespace {

// reduce_add16 of 16 accumulators at once: lane 4 k + j of the result is
// reduce_add16(a[4 j + s(k)]), s = (0 2 1 3). The same adds as
// _mm512_reduce_add_ps on each (t = a[i] + a[i + 8], u = t[i] + t[i + 4],
// (u0 + u2) + (u1 + u3)), two or four accumulators side by side; each step
// pairs a blend with one shuffle.
// reduce16x16 after its first step: x[p] holds t of a[2p] in lanes 0..7 and of
// a[2p + 1] in 8..15 (t[i] = a[i] + a[i + 8]).
__m512 reduce16x16_halves(const __m512* x) {
  __m512 y[4];
  const __m512i hi_lo = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
  for (int q = 0; q < 4; ++q)  // y[q]: u of a[4q], a[4q + 2], a[4q + 1], a[4q + 3] in 128-bit blocks 0..3
    y[q] = _mm512_add_ps(_mm512_mask_blend_ps(0xF0F0, x[2 * q], x[2 * q + 1]),
                         _mm512_permutex2var_ps(x[2 * q], hi_lo, x[2 * q + 1]));
  auto pairs = [](__m512 lo, __m512 hi) {  // per block: [u0 + u2, u1 + u3] of lo's, then of hi's
    return _mm512_add_ps(_mm512_mask_blend_ps(0xCCCC, lo, hi), _mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(1, 0, 3, 2)));
  };
  const __m512 v01 = pairs(y[0], y[1]), v23 = pairs(y[2], y[3]);
  return _mm512_add_ps(_mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}

__m512 reduce16x16(const __m512* a) {
  __m512 x[8];
  for (int p = 0; p < 8; ++p)  // x[p]: t of a[2p] in lanes 0..7, of a[2p + 1] in 8..15
    x[p] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a[2 * p], a[2 * p + 1]),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x4E));
  return reduce16x16_halves(x);
}

// Lane 4 j + c of permutexvar(reduce_to_rows(), reduce16x16(a)) is the sum of a[4 j + c].
inline __m512i reduce_to_rows() { return _mm512_setr_epi32(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15); }

}  // namespace
}  // namespace opal::cpu::avx512
