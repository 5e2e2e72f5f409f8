// Small AVX2 helpers shared by the x86_avx2 files (unnamed namespace: each
// file gets its own copy, compiled with its own flags).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum8_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 abs_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Four vectors of 8 int32 (each in [-128, 127]) to 32 int8 in element order.
inline __m256i pack_epi32_to_epi8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // lane-interleaved groups of 4
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// A Q5_0 block's 32 five-bit quants q in [0, 31] (standing for q - 16) as
// bytes in element order: the nibbles as Q4_0's plus bit j of qh (bytes 2-5)
// as bit 4 of element j.
inline __m256i q5_0_quants(const uint8_t* blk) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
  int32_t h;
  std::memcpy(&h, blk + 2, 4);
  // byte i <- byte i/8 of qh, tested against bit i%8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(h), _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// int32 pair sums of 16 int16 lanes.
inline __m256i ones16() { return _mm256_set1_epi16(1); }

// A compiler barrier on an integer accumulator: the batch tiles pass each
// updated sum through it so the adds stay a chain in a register. Without it
// GCC reassociates a block's int16 / int32 adds into a tree, computing all of
// a tile's vpmaddubsw products first and spilling most of them to the stack
// (the avx2 Q4_0 tile: about 40 stores and reloads per block, 30 % of its
// time; stop 15). The bits do not change: integer adds are exact.
inline __m256i in_register(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

// Eight Q4_0 rows' block sums against one Q8_0 block (xlo / xhi: its first and
// last 16 bytes in both 128-bit lanes): v[j] holds row j's 16 nibble bytes in
// the low lane and row j + 4's in the high one. Lane i of the result is row i's
// exact sum of nibble x activation (the -8 offset not yet applied). The AVX2
// Q4_0 decode kernel and the row-group kernel share it, so they agree bit for bit.
// The rows' int16 pair sums are reduced in int16 (stop 26: each int16 of p[j] is
// at most 2 * 2 * 15 * 128 = 7680 in magnitude, four of them 30720 < 32768, so
// no add wraps) and meet vpmaddwd by ones once, not once per vector: 10 operations
// after the products where the int32 tree took 13, three of them multiplies.
inline __m256i q4_0_block_sums8(const __m256i v[4], __m256i xlo, __m256i xhi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i p[4];
  for (int j = 0; j < 4; ++j) {
    const __m256i ql = _mm256_and_si256(v[j], low4), qh = _mm256_and_si256(_mm256_srli_epi16(v[j], 4), low4);
    p[j] = _mm256_add_epi16(_mm256_maddubs_epi16(ql, xlo), _mm256_maddubs_epi16(qh, xhi));
  }
  // Per 128-bit lane, dword k of t0 / t1: two int16 sums of 2 of vector (k & 1) / (2 + (k & 1))'s int16.
  const __m256i t0 = _mm256_add_epi16(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
  const __m256i t1 = _mm256_add_epi16(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
  // Dword j of u: row j's (low lane) or j + 4's (high lane) 16 products as two int16 sums of 8.
  const __m256i u = _mm256_add_epi16(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
  return _mm256_madd_epi16(u, ones16());
}

// 2^e for integral e in [-126, 127], per lane.
inline __m256 pow2i(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// llama_order::expf_avx512 on 8 lanes (the attention softmax's and the RWKV
// kernels' exp), in two parts that the block softmax (attn_avx2.cpp's
// exp_sum_step) also takes one by one.
// expf8_poly: n = round(x / ln 2) and the polynomial j ~ e^(x - n ln 2).
struct ExpParts {
  __m256 n, j;
};
inline ExpParts expf8_poly(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
  return {n, j};
}

// expf8_scale: j * 2^n as scale_pow2 (j * 2^a exact, then one rounding by
// 2^(n - a), a = n / 2), and 0 / inf where |n| > 192.
inline __m256 expf8_scale(ExpParts e) {
  const __m256 big = _mm256_cmp_ps(abs_ps(e.n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256i ni = _mm256_cvttps_epi32(_mm256_andnot_ps(big, e.n));  // n is integral; 0 where big
  const __m256i a = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);  // n / 2, toward 0
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(e.j, pow2i(a)), pow2i(_mm256_sub_epi32(ni, a)));
  if (_mm256_testz_ps(big, big)) return res;
  const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                      _mm256_cmp_ps(e.n, _mm256_setzero_ps(), _CMP_LE_OQ));
  return _mm256_blendv_ps(res, alt, big);
}

inline __m256 expf8(__m256 x) { return expf8_scale(expf8_poly(x)); }

}  // namespace
