// The tiled attention's kernels (kernels/attn_flash.h) with AVX-512.
// Layout: f32 rows of K and V per tile, row-major. dots: the K tile is
// transposed once (8 x 8 blocks) to [dk][64 cells], then register tiles of
// 6 query rows x 64 cells (four 16-cell vectors) walk dk, each q element
// broadcast against the four vectors (no horizontal sums); accum: register
// tiles of 6 query rows x 64 columns of V walk the tile's cells, each V vector
// feeding 6 FMAs (masked loads and stores for a dv that is not a multiple of
// 16); exp: exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 in two
// parts, p a degree-6 polynomial (the AVX2 form's, 16 lanes: relative error
// about 2e-7 on [-88, 0]; below -87.3 it flushes to 0). Widening: f16 by
// vcvtph2ps, q8_0 / q4_0 blocks as d * q (q4_0: nibble - 8, low nibbles first).
// Decode over an f16 cache (up to 4 query rows) reads K and V in place: dots_f16
// converts 4 cells' K rows per 16 dims once for all rows (4 x rows accumulators,
// one 4-way horizontal sum per row and 4 cells; dk 64 and 128 unrolled, so each
// load walks the tile with one stride, 4 rows, which the hardware prefetcher
// follows); accum_f16 converts each V row once per 64 columns for all rows (128
// columns in one pass for up to 2 rows: each V row read once). The integer K·q
// of a q8_0 / q4_0 cache (dots_*_int) takes 4 cells at a time, two per vector:
// per 32-block one vpdpbusd a row gives both cells' 8 exact lanes (K read as
// unsigned bytes, q8_0 as k + 128, q4_0's nibbles; q's lane starts correct
// the offset), converted and added to 8-lane accumulators by one FMA with
// d_k * d_q (llama.cpp's vec_dot order), then hsum8's tree for 4 cells at once.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/quant/blocks.h"

namespace opal::cpu::avx512 {
namespace {

__mmask16 flash_mask(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

void widen_f16(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const uint16_t* row = reinterpret_cast<const uint16_t*>(base + uint64_t(cells[r]) * stride);
    float* o = dst + r * ld;
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = flash_mask(d - i);
      _mm512_mask_storeu_ps(o + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + i)));
    }
  }
}

void widen_q8_0(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cells[r]) * stride);
    float* o = dst + r * ld;
    for (int64_t blk = 0; blk < d / 32; ++blk, o += 32) {
      const __m512 dd = _mm512_set1_ps(_cvtsh_ss(b[blk].d));
      for (int h = 0; h < 2; ++h) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[blk].qs + 16 * h));
        _mm512_storeu_ps(o + 16 * h, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))));
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
      const __m512 dd = _mm512_set1_ps(_cvtsh_ss(b[blk].d));
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[blk].qs));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);                     // elements 0-15
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);  // elements 16-31
      _mm512_storeu_ps(o, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
      _mm512_storeu_ps(o + 16, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
    }
  }
}

// out[c * ldo + r] = in[r * ldi + c] for an 8 x 8 block.
void flash_transpose8(const float* in, int64_t ldi, float* out, int64_t ldo) {
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

constexpr int64_t kFlashMaxDk = 256;  // the transposed tile's depth (larger heads take the row form)

// Row by row for large heads or single rows: 16-lane FMAs along dk, one sum per cell.
void dots_rows(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
               float* s, int64_t lds) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t r = 0; r < n; ++r) {
      __m512 a = _mm512_setzero_ps();
      for (int64_t i = 0; i < dk; i += 16) {
        const __mmask16 mk = flash_mask(dk - i);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + j * ldq + i), _mm512_maskz_loadu_ps(mk, k + r * ldk + i), a);
      }
      s[j * lds + r] = _mm512_reduce_add_ps(a) * scale;
    }
}

// R query rows x C vectors of 16 cells from the transposed tile kt ([dk][kFlashTile]).
template <int R, int C>
void dots_tile(const float* q, int64_t ldq, const float* kt, int64_t dk, float scale, float* s, int64_t lds,
               int64_t n_left) {
  __m512 a[R][C];
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c) a[j][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {
    __m512 kv[C];
    for (int c = 0; c < C; ++c) kv[c] = _mm512_loadu_ps(kt + i * kFlashTile + 16 * c);
    for (int j = 0; j < R; ++j) {
      const __m512 b = _mm512_set1_ps(q[j * ldq + i]);
      for (int c = 0; c < C; ++c) a[j][c] = _mm512_fmadd_ps(b, kv[c], a[j][c]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int c = 0; c < C; ++c) {
    const __mmask16 mk = flash_mask(n_left - 16 * c);
    for (int j = 0; j < R; ++j) _mm512_mask_storeu_ps(s + j * lds + 16 * c, mk, _mm512_mul_ps(a[j][c], sc));
  }
}

template <int R>
void dots_rows_of(const float* q, int64_t ldq, const float* kt, int64_t n, int64_t dk, float scale, float* s,
                  int64_t lds) {
  const int64_t vecs = (n + 15) / 16;  // n <= kFlashTile: at most 4
  if (vecs >= 4) dots_tile<R, 4>(q, ldq, kt, dk, scale, s, lds, n);
  else if (vecs == 3) dots_tile<R, 3>(q, ldq, kt, dk, scale, s, lds, n);
  else if (vecs == 2) dots_tile<R, 2>(q, ldq, kt, dk, scale, s, lds, n);
  else dots_tile<R, 1>(q, ldq, kt, dk, scale, s, lds, n);
}

void dots(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
          float* s, int64_t lds) {
  if (dk > kFlashMaxDk || n > kFlashTile || m < 2) return dots_rows(q, ldq, m, k, ldk, n, dk, scale, s, lds);
  alignas(64) float kt[kFlashMaxDk * kFlashTile];
  flash_transpose_k_tile<flash_transpose8>(k, ldk, n, dk, kt);
  // the last 16-cell vector may read past the transposed cells: zero them
  for (int64_t r = (n + 7) / 8 * 8; r < (n + 15) / 16 * 16; ++r)
    for (int64_t i = 0; i < dk; ++i) kt[i * kFlashTile + r] = 0.0f;
  int64_t j = 0;
  for (; j + 6 <= m; j += 6) dots_rows_of<6>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
  switch (m - j) {
    case 5: return dots_rows_of<5>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
    case 4: return dots_rows_of<4>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
    case 3: return dots_rows_of<3>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
    case 2: return dots_rows_of<2>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
    case 1: return dots_rows_of<1>(q + j * ldq, ldq, kt, n, dk, scale, s + j * lds, lds);
    default: return;
  }
}

__m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

float exp_sum(float* s, int64_t n, float mx) {
  const __m512 m = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t r = 0; r < n; r += 16) {
    const __mmask16 mk = flash_mask(n - r);
    const __m512 x = _mm512_mask_loadu_ps(ninf, mk, s + r);
    const __mmask16 live = _mm512_cmp_ps_mask(x, ninf, _CMP_NEQ_UQ);
    const __m512 e = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(x, m)));
    _mm512_mask_storeu_ps(s + r, mk, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

float mask_max(float* s, int64_t n, int64_t a, int64_t e) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i va = _mm512_set1_epi32(int(a)), ve = _mm512_set1_epi32(int(e));
  const bool all = a <= 0 && e >= n;  // nothing to mask: no stores
  __m512 mx = ninf;
  for (int64_t r = 0; r < n; r += 16) {
    const __mmask16 in = flash_mask(n - r);
    const __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32(int(r)));
    const __mmask16 vis = all ? in : in & _mm512_cmpge_epi32_mask(idx, va) & _mm512_cmplt_epi32_mask(idx, ve);
    const __m512 x = _mm512_mask_loadu_ps(ninf, vis, s + r);
    if (!all) _mm512_mask_storeu_ps(s + r, in, x);
    mx = _mm512_max_ps(mx, x);
  }
  return _mm512_reduce_max_ps(mx);
}

void scale_row(float* x, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = flash_mask(n - i);
    _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), fv));
  }
}

// R query rows x C vectors of 16 columns (the last one masked when Masked), over the tile's n cells. The
// unmasked form is what whole 16s of columns take: with masked loads GCC 12 kept the accumulators in memory
// (a store of each per cell).
template <int R, int C, bool Masked>
void accum_tile(const float* p, int64_t ldp, const float* v, int64_t ldv, int64_t n, float* acc, int64_t lda,
                int64_t cols) {
  __mmask16 mk[C];
  for (int c = 0; c < C; ++c) mk[c] = Masked ? flash_mask(cols - 16 * c) : __mmask16(0xFFFF);
  __m512 a[R][C];
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c)
      a[j][c] = Masked ? _mm512_maskz_loadu_ps(mk[c], acc + j * lda + 16 * c) : _mm512_loadu_ps(acc + j * lda + 16 * c);
  for (int64_t r = 0; r < n; ++r) {
    __m512 x[C];
    for (int c = 0; c < C; ++c)
      x[c] = Masked ? _mm512_maskz_loadu_ps(mk[c], v + r * ldv + 16 * c) : _mm512_loadu_ps(v + r * ldv + 16 * c);
    for (int j = 0; j < R; ++j) {
      const __m512 b = _mm512_set1_ps(p[j * ldp + r]);
      for (int c = 0; c < C; ++c) a[j][c] = _mm512_fmadd_ps(b, x[c], a[j][c]);
    }
  }
  for (int j = 0; j < R; ++j)
    for (int c = 0; c < C; ++c) {
      if (Masked) _mm512_mask_storeu_ps(acc + j * lda + 16 * c, mk[c], a[j][c]);
      else _mm512_storeu_ps(acc + j * lda + 16 * c, a[j][c]);
    }
}

template <int R, int C>
void accum_tile_cols(const float* p, int64_t ldp, const float* v, int64_t ldv, int64_t n, float* acc, int64_t lda,
                     int64_t cols) {
  if (cols >= 16 * C) accum_tile<R, C, false>(p, ldp, v, ldv, n, acc, lda, cols);
  else accum_tile<R, C, true>(p, ldp, v, ldv, n, acc, lda, cols);
}

template <int R>
void accum_rows_of(const float* p, int64_t ldp, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
                   int64_t lda) {
  for (int64_t i0 = 0; i0 < dv; i0 += 64) {
    const int64_t cols = dv - i0, vecs = (cols + 15) / 16;
    if (vecs >= 4) accum_tile_cols<R, 4>(p, ldp, v + i0, ldv, n, acc + i0, lda, cols);
    else if (vecs == 3) accum_tile_cols<R, 3>(p, ldp, v + i0, ldv, n, acc + i0, lda, cols);
    else if (vecs == 2) accum_tile_cols<R, 2>(p, ldp, v + i0, ldv, n, acc + i0, lda, cols);
    else accum_tile_cols<R, 1>(p, ldp, v + i0, ldv, n, acc + i0, lda, cols);
  }
}

void accum(const float* p, int64_t ldp, int64_t m, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
           int64_t lda) {
  int64_t j = 0;
  for (; j + 6 <= m; j += 6) accum_rows_of<6>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
  switch (m - j) {
    case 5: return accum_rows_of<5>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
    case 4: return accum_rows_of<4>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
    case 3: return accum_rows_of<3>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
    case 2: return accum_rows_of<2>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
    case 1: return accum_rows_of<1>(p + j * ldp, ldp, v, ldv, n, dv, acc + j * lda, lda);
    default: return;
  }
}

// Decode's in-place forms (up to kFlashDirectRows query rows; d % 16 == 0, q8_0 / q4_0: % 32): 16 values of a
// row from i (f16: vcvtph2ps; q8_0: d * q of half a block; q4_0: d * (nibble - 8) of half a block, the low
// nibbles of its 16 bytes for the first half, the high ones for the second).
struct F16Row {
  static __m512 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + uint64_t(cell) * stride + 2 * i)));
  }
};
struct Q8Row {
  static __m512 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(base + uint64_t(cell) * stride) + i / 32;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + (i & 16)));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};
struct Q4Row {
  static __m512 at(const uint8_t* base, uint64_t stride, int32_t cell, int64_t i) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(base + uint64_t(cell) * stride) + i / 32;
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i nib = _mm_and_si128(_mm_srl_epi16(raw, _mm_cvtsi32_si128(int(i & 16) >> 2)), _mm_set1_epi8(15));
    const __m128i q = _mm_sub_epi8(nib, _mm_set1_epi8(8));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};

// Lanes 0-3 of the result: the sums of a, b, c, d.
__m128 hsum4x16(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a0+a2 b0+b2 a1+a3 b1+b3
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));  // a b c d per 128 bits
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// M query rows x 4 cells at a time: each K row converted once for the M rows, 4M accumulators. DK > 0: dk
// known at compile time, the loop over it unrolled, so that each load of K has one address stride for the whole
// tile (4 cells) and the hardware's stride prefetcher follows it.

// Four cells' scores into s[0..4), or the first `left` of them at a partial last group.
void store_scores4(__m128 t, int64_t left, float* s) {
  if (left >= 4) {
    _mm_storeu_ps(s, t);
    return;
  }
  alignas(16) float tmp[4];
  _mm_store_ps(tmp, t);
  for (int64_t u = 0; u < left; ++u) s[u] = tmp[u];
}
template <class Row, int M, int DK = 0>
void dots_f16_rows(const float* q, int64_t ldq, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                   int64_t dk_rt, float scale, float* s, int64_t lds) {
  const int64_t dk = DK > 0 ? DK : dk_rt;
  const __m128 sc = _mm_set1_ps(scale);
  for (int64_t r = 0; r < n; r += 4) {
    int32_t c[4];
    for (int u = 0; u < 4; ++u) c[u] = cells[r + u < n ? r + u : r];  // past n: a repeat, its sums dropped
    __m512 a[M][4];
    for (int j = 0; j < M; ++j)
      for (int u = 0; u < 4; ++u) a[j][u] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int64_t i = 0; i < dk; i += 16) {
      __m512 x[4];
      for (int u = 0; u < 4; ++u) x[u] = Row::at(base, stride, c[u], i);
      for (int j = 0; j < M; ++j) {
        const __m512 qv = _mm512_loadu_ps(q + j * ldq + i);
        for (int u = 0; u < 4; ++u) a[j][u] = _mm512_fmadd_ps(qv, x[u], a[j][u]);
      }
    }
    for (int j = 0; j < M; ++j) {
      const __m128 t = _mm_mul_ps(hsum4x16(a[j][0], a[j][1], a[j][2], a[j][3]), sc);
      store_scores4(t, n - r, s + j * lds + r);
    }
  }
}

template <class Row, int DK>
void dots_direct_dk(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                    int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  switch (m) {
    case 4: return dots_f16_rows<Row, 4, DK>(q, ldq, base, stride, cells, n, dk, scale, s, lds);
    case 3: return dots_f16_rows<Row, 3, DK>(q, ldq, base, stride, cells, n, dk, scale, s, lds);
    case 2: return dots_f16_rows<Row, 2, DK>(q, ldq, base, stride, cells, n, dk, scale, s, lds);
    case 1: return dots_f16_rows<Row, 1, DK>(q, ldq, base, stride, cells, n, dk, scale, s, lds);
    default: return;
  }
}

template <class Row>
void dots_direct(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                 int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  if (dk == 64) return dots_direct_dk<Row, 64>(q, ldq, m, base, stride, cells, n, dk, scale, s, lds);
  if (dk == 128) return dots_direct_dk<Row, 128>(q, ldq, m, base, stride, cells, n, dk, scale, s, lds);
  dots_direct_dk<Row, 0>(q, ldq, m, base, stride, cells, n, dk, scale, s, lds);
}

// M query rows x C vectors of 16 columns of V, over the n cells; each V vector converted once for the M rows.
template <class Row, int M, int C>
void accum_f16_tile(const float* p, int64_t ldp, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                    int64_t i0, float* acc, int64_t lda) {
  __m512 a[M][C];
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < C; ++c) a[j][c] = _mm512_loadu_ps(acc + j * lda + i0 + 16 * c);
  for (int64_t r = 0; r < n; ++r) {
    __m512 x[C];
    for (int c = 0; c < C; ++c) x[c] = Row::at(base, stride, cells[r], i0 + 16 * c);
    for (int j = 0; j < M; ++j) {
      const __m512 b = _mm512_set1_ps(p[j * ldp + r]);
      for (int c = 0; c < C; ++c) a[j][c] = _mm512_fmadd_ps(b, x[c], a[j][c]);
    }
  }
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + j * lda + i0 + 16 * c, a[j][c]);
}

template <class Row, int M>
void accum_f16_rows(const float* p, int64_t ldp, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
                    int64_t dv, float* acc, int64_t lda) {
  // Up to 2 rows of 128 columns in one pass (16 accumulators): each V row read once, one stride per load.
  if (M <= 2 && dv == 128) return accum_f16_tile<Row, M, 8>(p, ldp, base, stride, cells, n, 0, acc, lda);
  for (int64_t i0 = 0; i0 < dv; i0 += 64) {
    const int64_t vecs = (dv - i0) / 16;
    if (vecs >= 4) accum_f16_tile<Row, M, 4>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else if (vecs == 3) accum_f16_tile<Row, M, 3>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else if (vecs == 2) accum_f16_tile<Row, M, 2>(p, ldp, base, stride, cells, n, i0, acc, lda);
    else accum_f16_tile<Row, M, 1>(p, ldp, base, stride, cells, n, i0, acc, lda);
  }
}

template <class Row>
void accum_direct(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                  int64_t n, int64_t dv, float* acc, int64_t lda) {
  switch (m) {
    case 4: return accum_f16_rows<Row, 4>(p, ldp, base, stride, cells, n, dv, acc, lda);
    case 3: return accum_f16_rows<Row, 3>(p, ldp, base, stride, cells, n, dv, acc, lda);
    case 2: return accum_f16_rows<Row, 2>(p, ldp, base, stride, cells, n, dv, acc, lda);
    case 1: return accum_f16_rows<Row, 1>(p, ldp, base, stride, cells, n, dv, acc, lda);
    default: return;
  }
}

// The integer K·q of a q8_0 / q4_0 cache (kernels/attn_flash.h, dots_q8_0_int): two cells per vector, cell u0's
// block in the low 256 bits and u1's in the high ones, as unsigned bytes (q8_0: k + 128; q4_0: the nibbles, low
// ones first), so that one vpdpbusd against q's block (stored twice) from the lane starts gives both cells' 8
// exact lanes.
struct Q8Blocks {
  static __m512i pair(const uint8_t* r0, const uint8_t* r1, int64_t b) {
    const auto* b0 = reinterpret_cast<const quant::BlockQ8_0*>(r0) + b;
    const auto* b1 = reinterpret_cast<const quant::BlockQ8_0*>(r1) + b;
    const __m512i x =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0->qs))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1->qs)), 1);
    return _mm512_xor_si512(x, _mm512_set1_epi8(char(0x80)));
  }
  static uint16_t d(const uint8_t* r, int64_t b) { return reinterpret_cast<const quant::BlockQ8_0*>(r)[b].d; }
};
struct Q4Blocks {
  static __m512i pair(const uint8_t* r0, const uint8_t* r1, int64_t b) {
    const auto* b0 = reinterpret_cast<const quant::BlockQ4_0*>(r0) + b;
    const auto* b1 = reinterpret_cast<const quant::BlockQ4_0*>(r1) + b;
    // 128-bit quarters u0, u0, u1, u1; the second of each cell shifted right by 4 (its high nibbles)
    const __m512i x =
        _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0->qs))),
                                    __mmask16(0xFF00), _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1->qs)));
    return _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(15));
  }
  static uint16_t d(const uint8_t* r, int64_t b) { return reinterpret_cast<const quant::BlockQ4_0*>(r)[b].d; }
};

// [f32(d0) x 8 | f32(d1) x 8].
__m512 scale_pair(uint16_t d0, uint16_t d1) {
  return _mm512_cvtph_ps(
      _mm256_mask_blend_epi16(__mmask16(0xFF00), _mm256_set1_epi16(short(d0)), _mm256_set1_epi16(short(d1))));
}

// hsum8 (llama_order.h) of the four cells' 8-lane accumulators x01 = [c0 | c1], x23 = [c2 | c3], in lanes 0-3.
__m128 hsum8_cells4(__m512 x01, __m512 x23) {
  const __m512 lo = _mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0));         // lanes 0-3 of c0, c1, c2, c3
  const __m512 hi = _mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1));         // lanes 4-7
  const __m512 u = _mm512_add_ps(lo, hi);                                            // u_i = a_i + a_(i+4)
  const __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));  // u0 + u2, u1 + u3
  const __m512 w = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));  // (u0 + u2) + (u1 + u3)
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

// M query rows x 4 cells at a time. NB > 0: dk / 32 known at compile time, the block loop unrolled (each load
// then has one address stride over the tile, as dots_f16_rows').
template <class Blocks, int M, int NB = 0>
void dots_int_rows(const uint8_t* q8, int64_t ldq8, const uint8_t* base, uint64_t stride, const int32_t* cells,
                   int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  const int64_t nb = NB > 0 ? NB : dk / 32;
  const __m128 sc = _mm_set1_ps(scale);
  for (int64_t r = 0; r < n; r += 4) {
    const uint8_t* row[4];
    for (int u = 0; u < 4; ++u) row[u] = base + uint64_t(cells[r + u < n ? r + u : r]) * stride;  // past n: dropped
    __m512 acc[M][2];
    for (int j = 0; j < M; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int64_t b = 0; b < nb; ++b) {
      const __m512i k01 = Blocks::pair(row[0], row[1], b), k23 = Blocks::pair(row[2], row[3], b);
      const __m512 d01 = scale_pair(Blocks::d(row[0], b), Blocks::d(row[1], b));
      const __m512 d23 = scale_pair(Blocks::d(row[2], b), Blocks::d(row[3], b));
      for (int j = 0; j < M; ++j) {
        const uint8_t* qj = q8 + j * ldq8;
        const __m512i qv = _mm512_loadu_si512(qj + 64 * b);
        const __m512i start = _mm512_loadu_si512(qj + 64 * nb + 64 * b);
        float qd;
        std::memcpy(&qd, qj + 128 * nb + 4 * b, 4);
        const __m512 dq = _mm512_set1_ps(qd);
        acc[j][0] =
            _mm512_fmadd_ps(_mm512_mul_ps(d01, dq), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, k01, qv)), acc[j][0]);
        acc[j][1] =
            _mm512_fmadd_ps(_mm512_mul_ps(d23, dq), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, k23, qv)), acc[j][1]);
      }
    }
    for (int j = 0; j < M; ++j) {
      const __m128 t = _mm_mul_ps(hsum8_cells4(acc[j][0], acc[j][1]), sc);
      store_scores4(t, n - r, s + j * lds + r);
    }
  }
}

template <class Blocks, int NB>
void dots_int_nb(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                 int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  switch (m) {
    case 4: return dots_int_rows<Blocks, 4, NB>(q8, ldq8, base, stride, cells, n, dk, scale, s, lds);
    case 3: return dots_int_rows<Blocks, 3, NB>(q8, ldq8, base, stride, cells, n, dk, scale, s, lds);
    case 2: return dots_int_rows<Blocks, 2, NB>(q8, ldq8, base, stride, cells, n, dk, scale, s, lds);
    case 1: return dots_int_rows<Blocks, 1, NB>(q8, ldq8, base, stride, cells, n, dk, scale, s, lds);
    default: return;
  }
}

template <class Blocks>
void dots_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
              int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  if (dk == 64) return dots_int_nb<Blocks, 2>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
  if (dk == 128) return dots_int_nb<Blocks, 4>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
  dots_int_nb<Blocks, 0>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
}

}  // namespace

const FlashKernels kFlashKernels = {"avx512",
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
                                    dots_direct<Q4Row>,
                                    accum_direct<Q4Row>,
                                    true,
                                    dots_int<Q8Blocks>,
                                    dots_int<Q4Blocks>,
                                    flash_online_softmax<mask_max, exp_sum, scale_row>};

}  // namespace opal::cpu::avx512
#endif  // x86
