// The tiled attention's kernels (kernels/attn_flash.h) with AVX2 + FMA + F16C.
// Layout: f32 rows of K and V per tile, row-major. dots: the K tile is
// transposed once (8 x 8 blocks) to [dk][64 cells], then register tiles of
// 4 query rows x 24 cells walk dk, each q element broadcast against three
// 8-cell vectors (no horizontal sums; up to 8 rows take the row form,
// 4 cells at a time with one horizontal sum each, untransposed); accum:
// register tiles of 3 query rows x 32 columns of V walk the tile's cells,
// each V vector feeding 3 FMAs; decode over an f16 cache (up to 4 query rows)
// reads K and V in place: dots_f16 converts 4 cells' K rows per 8 dims once for
// 2 rows (8 accumulators, one 4-way horizontal sum per row and 4 cells),
// accum_f16 converts each V row once per 24-32 columns for all rows;
// the integer K·q of a q8_0 / q4_0 cache: x86_avx2/flash_int_dots.h;
// exp: exp(x) = 2^n * p(r), n = round(x / ln 2),
// r = x - n ln 2 in two parts, p a degree-6 polynomial (relative error about
// 2e-7 on [-88, 0]; below -87.3 it flushes to 0).
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/x86_avx2/flash_int_dots.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/quant/blocks.h"

namespace opal::cpu::avx2 {
namespace {

void widen_f16(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const uint16_t* row = reinterpret_cast<const uint16_t*>(base + uint64_t(cells[r]) * stride);
    float* o = dst + r * ld;
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
      _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
    for (; i < d; ++i) o[i] = _cvtsh_ss(row[i]);
  }
}

void widen_q8_0(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cells[r]) * stride);
    float* o = dst + r * ld;
    for (int64_t blk = 0; blk < d / 32; ++blk, o += 32) {
      const __m256 dd = _mm256_set1_ps(_cvtsh_ss(b[blk].d));
      for (int k = 0; k < 4; ++k) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[blk].qs + 8 * k));
        _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
      }
    }
  }
}

void widen_q4_0(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                int64_t ld) {
  const __m128i low = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  for (int64_t r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(base + uint64_t(cells[r]) * stride);
    float* o = dst + r * ld;
    for (int64_t blk = 0; blk < d / 32; ++blk, o += 32) {
      const __m256 dd = _mm256_set1_ps(_cvtsh_ss(b[blk].d));
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[blk].qs));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);                     // elements 0-15
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);  // elements 16-31
      _mm256_storeu_ps(o + 0, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
      _mm256_storeu_ps(o + 16, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
      _mm256_storeu_ps(o + 24, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
  }
}

// Sum of the 8 lanes of each of a, b, c, d as lanes 0-3.
__m128 hsum4x8(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // per 128-bit half: a, b, c, d partial sums
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

float dot_tail(const float* q, const float* k, int64_t i, int64_t dk) {
  float a = 0.0f;
  for (; i < dk; ++i) a += q[i] * k[i];
  return a;
}

void dots_rows(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
               float* s, int64_t lds) {
  const int64_t d8 = dk & ~int64_t(7);
  const __m128 sc = _mm_set1_ps(scale);
  for (int64_t j = 0; j < m; ++j) {
    const float* qj = q + j * ldq;
    float* sj = s + j * lds;
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
      const float* k0 = k + r * ldk;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < d8; i += 8) {
        const __m256 qv = _mm256_loadu_ps(qj + i);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + ldk + i), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * ldk + i), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * ldk + i), a3);
      }
      __m128 t = hsum4x8(a0, a1, a2, a3);
      if (d8 < dk)
        t = _mm_add_ps(t, _mm_setr_ps(dot_tail(qj, k0, d8, dk), dot_tail(qj, k0 + ldk, d8, dk),
                                      dot_tail(qj, k0 + 2 * ldk, d8, dk), dot_tail(qj, k0 + 3 * ldk, d8, dk)));
      _mm_storeu_ps(sj + r, _mm_mul_ps(t, sc));
    }
    for (; r < n; ++r) {
      const float* kr = k + r * ldk;
      __m256 a = _mm256_setzero_ps();
      for (int64_t i = 0; i < d8; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(qj + i), _mm256_loadu_ps(kr + i), a);
      sj[r] = (hsum8(a) + dot_tail(qj, kr, d8, dk)) * scale;
    }
  }
}

// out[c * ldo + r] = in[r * ldi + c] for an 8 x 8 block.
void transpose8(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ldi);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(r[i], r[4 + i], 0x20));
    _mm256_storeu_ps(out + (4 + i) * ldo, _mm256_permute2f128_ps(r[i], r[4 + i], 0x31));
  }
}

constexpr int64_t kMaxDk = 256;  // the transposed tile's depth (larger heads take dots_rows)

// R query rows x C vectors of 8 cells from the transposed tile kt ([dk][kFlashTile]).
template <int R, int C>
void dots_tile(const float* q, int64_t ldq, const float* kt, int64_t dk, float scale, float* s, int64_t lds,
               int64_t n_left) {
  __m256 a[R][C];
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c) a[j][c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {
    __m256 kv[C];
    for (int c = 0; c < C; ++c) kv[c] = _mm256_loadu_ps(kt + i * kFlashTile + 8 * c);
    for (int j = 0; j < R; ++j) {
      const __m256 b = _mm256_broadcast_ss(q + j * ldq + i);
      for (int c = 0; c < C; ++c) a[j][c] = _mm256_fmadd_ps(b, kv[c], a[j][c]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
  for (int c = 0; c < C; ++c) {
    const int64_t left = n_left - 8 * c;  // cells of this vector to store
    const __m256i mk =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left > 8 ? 8 : left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int j = 0; j < R; ++j) {
      const __m256 x = _mm256_mul_ps(a[j][c], sc);
      if (left >= 8) _mm256_storeu_ps(s + j * lds + 8 * c, x);
      else _mm256_maskstore_ps(s + j * lds + 8 * c, mk, x);
    }
  }
}

template <int R>
void dots_rows_of(const float* q, int64_t ldq, const float* kt, int64_t n, int64_t dk, float scale, float* s,
                  int64_t lds) {
  for (int64_t r0 = 0; r0 < n; r0 += 24) {
    const int64_t left = n - r0, vecs = (left + 7) / 8;
    if (vecs >= 3) dots_tile<R, 3>(q, ldq, kt + r0, dk, scale, s + r0, lds, left);
    else if (vecs == 2) dots_tile<R, 2>(q, ldq, kt + r0, dk, scale, s + r0, lds, left);
    else dots_tile<R, 1>(q, ldq, kt + r0, dk, scale, s + r0, lds, left);
  }
}

void dots(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
          float* s, int64_t lds) {
  // Up to 8 rows (decode: one GQA group): the row form beats transpose + tiles (64 cells, dk 64, thread CPU
  // time: 2 rows 200 vs 385 ns, 3: 380 vs 520, 4: 510 vs 625, 8: 830-890 vs 1020; 24: 2380 vs 2480; 64 rows:
  // 8420 vs 6450).
  if (dk > kMaxDk || n > kFlashTile || m <= 8) return dots_rows(q, ldq, m, k, ldk, n, dk, scale, s, lds);
  alignas(32) float kt[kMaxDk * kFlashTile];
  flash_transpose_k_tile<transpose8>(k, ldk, n, dk, kt);
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) dots_rows_of<4>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
  if (m - j == 3) dots_rows_of<3>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
  else if (m - j == 2) dots_rows_of<2>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
  else if (m - j == 1) dots_rows_of<1>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
}

__m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

float mask_max(float* s, int64_t n, int64_t a, int64_t e) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i va = _mm256_set1_epi32(int(a) - 1), ve = _mm256_set1_epi32(int(e)), vn = _mm256_set1_epi32(int(n));
  const bool all = a <= 0 && e >= n;  // nothing to mask: no stores
  __m256 mx = ninf;
  for (int64_t r = 0; r < n; r += 8) {
    const __m256i idx = _mm256_add_epi32(iota, _mm256_set1_epi32(int(r)));
    const __m256i in = _mm256_cmpgt_epi32(vn, idx);
    __m256 x = _mm256_maskload_ps(s + r, in);
    if (!all) {
      const __m256i vis = _mm256_and_si256(_mm256_cmpgt_epi32(idx, va), _mm256_cmpgt_epi32(ve, idx));
      x = _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(vis));
      _mm256_maskstore_ps(s + r, in, x);
    }
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(in)));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

float exp_sum(float* s, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
  __m256 acc = _mm256_setzero_ps();
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    const __m256 x = _mm256_loadu_ps(s + r);
    const __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), exp8(_mm256_sub_ps(x, m)));
    _mm256_storeu_ps(s + r, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum8(acc);
  for (; r < n; ++r) {
    s[r] = s[r] == -INFINITY ? 0.0f : std::exp(s[r] - mx);
    sum += s[r];
  }
  return sum;
}

void scale_row(float* x, int64_t n, float f) {
  const __m256 fv = _mm256_set1_ps(f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), fv));
  for (; i < n; ++i) x[i] *= f;
}

void accum_rows(const float* p, int64_t ldp, int64_t m, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
                int64_t lda) {
  for (int64_t j = 0; j < m; ++j) {
    const float* pj = p + j * ldp;
    float* aj = acc + j * lda;
    int64_t i0 = 0;
    for (; i0 + 64 <= dv; i0 += 64) {  // 64 columns in 8 registers
      __m256 a[8];
      for (int c = 0; c < 8; ++c) a[c] = _mm256_loadu_ps(aj + i0 + 8 * c);
      for (int64_t r = 0; r < n; ++r) {
        const __m256 pr = _mm256_set1_ps(pj[r]);
        const float* vr = v + r * ldv + i0;
        for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pr, _mm256_loadu_ps(vr + 8 * c), a[c]);
      }
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(aj + i0 + 8 * c, a[c]);
    }
    for (; i0 + 8 <= dv; i0 += 8) {
      __m256 a = _mm256_loadu_ps(aj + i0);
      for (int64_t r = 0; r < n; ++r) a = _mm256_fmadd_ps(_mm256_set1_ps(pj[r]), _mm256_loadu_ps(v + r * ldv + i0), a);
      _mm256_storeu_ps(aj + i0, a);
    }
    for (; i0 < dv; ++i0)
      for (int64_t r = 0; r < n; ++r) aj[i0] += pj[r] * v[r * ldv + i0];
  }
}

// R query rows x C vectors of 8 columns, over the tile's n cells.
template <int R, int C>
void accum_tile(const float* p, int64_t ldp, const float* v, int64_t ldv, int64_t n, float* acc, int64_t lda) {
  __m256 a[R][C];
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c) a[j][c] = _mm256_loadu_ps(acc + j * lda + 8 * c);
  for (int64_t r = 0; r < n; ++r) {
    __m256 x[C];
    for (int c = 0; c < C; ++c) x[c] = _mm256_loadu_ps(v + r * ldv + 8 * c);
    for (int j = 0; j < R; ++j) {
      const __m256 b =
          _mm256_set1_ps(p[j * ldp + r]);  // (broadcast_ss(p + ...): GCC 12 kept the accumulators in memory)
      for (int c = 0; c < C; ++c) a[j][c] = _mm256_fmadd_ps(b, x[c], a[j][c]);
    }
  }
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + j * lda + 8 * c, a[j][c]);
}

template <int R>
void accum_rows_of(const float* p, int64_t ldp, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
                   int64_t lda) {
  const int64_t d8 = dv & ~int64_t(7);
  for (int64_t i0 = 0; i0 < d8; i0 += 32) {
    const int64_t vecs = (d8 - i0) / 8;
    if (vecs >= 4) accum_tile<R, 4>(p, ldp, v + i0, ldv, n, acc + i0, lda);
    else if (vecs == 3) accum_tile<R, 3>(p, ldp, v + i0, ldv, n, acc + i0, lda);
    else if (vecs == 2) accum_tile<R, 2>(p, ldp, v + i0, ldv, n, acc + i0, lda);
    else accum_tile<R, 1>(p, ldp, v + i0, ldv, n, acc + i0, lda);
  }
  for (int j = 0; j < R; ++j)
    for (int64_t i = d8; i < dv; ++i)
      for (int64_t r = 0; r < n; ++r) acc[j * lda + i] += p[j * ldp + r] * v[r * ldv + i];
}

void accum(const float* p, int64_t ldp, int64_t m, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
           int64_t lda) {
  if (m == 1) return accum_rows(p, ldp, m, v, ldv, n, dv, acc, lda);
  int64_t j = 0;
  for (; j + 3 <= m; j += 3) accum_rows_of<3>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
  if (m - j == 2) accum_rows_of<2>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
  else if (m - j == 1) accum_rows_of<1>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
}

// Decode's in-place forms (up to kFlashDirectRows query rows; d % 16 == 0, q8_0 / q4_0: % 32): 8 values of a row
// from i (f16: vcvtph2ps; q8_0: d * q of a quarter block; q4_0: d * (nibble - 8) of a quarter block: 8 bytes at
// qs + (i & 8), their low nibbles for the first half of the block, the high ones for the second).
struct F16Row {
  static __m256 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + uint64_t(cell) * stride + 2 * i)));
  }
};
struct Q8Row {
  static __m256 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cell) * stride) + i / 32;
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + (i & 24)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
};
struct Q4Row {
  static __m256 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(base + uint64_t(cell) * stride) + i / 32;
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + (i & 8)));
    const __m128i nib = _mm_and_si128(_mm_srl_epi16(raw, _mm_cvtsi32_si128(int(i & 16) >> 2)), _mm_set1_epi8(15));
    const __m128i q = _mm_sub_epi8(nib, _mm_set1_epi8(8));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
};

// M (1 or 2) query rows x 4 cells at a time: each K row converted once for the M rows, 4M accumulators.
template <class Row, int M>
void dots_f16_rows(const float* q, int64_t ldq, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                   int64_t dk, float scale, float* s, int64_t lds) {
  const __m128 sc = _mm_set1_ps(scale);
  for (int64_t r = 0; r < n; r += 4) {
    int32_t c[4];
    for (int u = 0; u < 4; ++u) c[u] = cells[r + u < n ? r + u : r];  // past n: a repeat, its sums dropped
    __m256 a[M][4];
    for (int j = 0; j < M; ++j)
      for (int u = 0; u < 4; ++u) a[j][u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; i += 8) {
      __m256 x[4];
      for (int u = 0; u < 4; ++u) x[u] = Row::at(base, stride, c[u], i);
      for (int j = 0; j < M; ++j) {
        const __m256 qv = _mm256_loadu_ps(q + j * ldq + i);
        for (int u = 0; u < 4; ++u) a[j][u] = _mm256_fmadd_ps(qv, x[u], a[j][u]);
      }
    }
    for (int j = 0; j < M; ++j) {
      const __m128 t = _mm_mul_ps(hsum4x8(a[j][0], a[j][1], a[j][2], a[j][3]), sc);
      if (r + 4 <= n) {
        _mm_storeu_ps(s + j * lds + r, t);
      } else {
        alignas(16) float tmp[4];
        _mm_store_ps(tmp, t);
        for (int64_t u = 0; u < n - r; ++u) s[j * lds + r + u] = tmp[u];
      }
    }
  }
}

template <class Row>
void dots_direct(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                 int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  int64_t j = 0;
  for (; j + 2 <= m; j += 2)
    dots_f16_rows<Row, 2>(q + j * ldq, ldq, base, stride, cells, n, dk, scale, s + j * lds, lds);
  if (j < m) dots_f16_rows<Row, 1>(q + j * ldq, ldq, base, stride, cells, n, dk, scale, s + j * lds, lds);
}

// q4_0 K: widened (at most 8192 values at a time, on the stack) and then the tile `dots`. Unpacking nibbles per
// row pair cost more than it saved (d2048, 3 rows: ATTENTION min 148-156 us widened, 159-161 in place); V stays
// in place (each V vector converted once for all the rows).
void dots_q4_0_widened(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride,
                       const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  if (dk > 8192) return dots_direct<Q4Row>(q, ldq, m, base, stride, cells, n, dk, scale, s, lds);
  alignas(32) float buf[8192];
  const int64_t chunk = 8192 / dk;
  for (int64_t r = 0; r < n; r += chunk) {
    const int64_t nn = std::min(chunk, n - r);
    widen_q4_0(base, stride, cells + r, nn, dk, buf, dk);
    dots(q, ldq, m, buf, dk, nn, dk, scale, s + r, lds);
  }
}

// M query rows x C vectors of 8 columns of V, over the n cells; each V vector converted once for the M rows.
template <class Row, int M, int C>
void accum_f16_tile(const float* p, int64_t ldp, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                    int64_t i0, float* acc, int64_t lda) {
  __m256 a[M][C];
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < C; ++c) a[j][c] = _mm256_loadu_ps(acc + j * lda + i0 + 8 * c);
  for (int64_t r = 0; r < n; ++r) {
    __m256 x[C];
    for (int c = 0; c < C; ++c) x[c] = Row::at(base, stride, cells[r], i0 + 8 * c);
    for (int j = 0; j < M; ++j) {
      const __m256 b =
          _mm256_set1_ps(p[j * ldp + r]);  // (broadcast_ss(p + ...): GCC 12 kept the accumulators in memory)
      for (int c = 0; c < C; ++c) a[j][c] = _mm256_fmadd_ps(b, x[c], a[j][c]);
    }
  }
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + j * lda + i0 + 8 * c, a[j][c]);
}

// Up to CMax vectors at a time (3 rows: 3 x 3 accumulators; 1-2 rows: 4 per row).
template <class Row, int M, int CMax>
void accum_f16_rows(const float* p, int64_t ldp, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                    int64_t dv, float* acc, int64_t lda) {
  for (int64_t i0 = 0; i0 < dv;) {
    const int64_t vecs = std::min<int64_t>(CMax, (dv - i0) / 8);
    if (vecs == 4) accum_f16_tile<Row, M, CMax == 4 ? 4 : 1>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else if (vecs == 3) accum_f16_tile<Row, M, 3>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else if (vecs == 2) accum_f16_tile<Row, M, 2>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else accum_f16_tile<Row, M, 1>(p, ldp, base, stride, cells, n, i0, acc, lda);
    i0 += 8 * vecs;
  }
}

template <class Row>
void accum_direct(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                  int64_t n, int64_t dv, float* acc, int64_t lda) {
  if (m == 3) return accum_f16_rows<Row, 3, 3>(p, ldp, base, stride, cells, n, dv, acc, lda);
  int64_t j = 0;
  for (; j + 2 <= m; j += 2)
    accum_f16_rows<Row, 2, 4>(p + j * ldp, ldp, base, stride, cells, n, dv, acc + j * lda, lda);
  if (j < m) accum_f16_rows<Row, 1, 4>(p + j * ldp, ldp, base, stride, cells, n, dv, acc + j * lda, lda);
}

}  // namespace

const FlashKernels kFlashKernels = {"avx2",
                                    widen_f16,
                                    widen_q8_0,
                                    widen_q4_0,
                                    dots,
                                    exp_sum,
                                    mask_max,
                                    accum,
                                    dots_direct<F16Row>,
                                    accum_direct<F16Row>,
                                    dots_direct<Q8Row>,
                                    accum_direct<Q8Row>,
                                    dots_q4_0_widened,
                                    accum_direct<Q4Row>,
                                    false,
                                    flash_dots_int<MaddQ8>,
                                    flash_dots_int<MaddQ4>,
                                    flash_online_softmax<mask_max, exp_sum, scale_row>};

}  // namespace opal::cpu::avx2
#endif  // x86
