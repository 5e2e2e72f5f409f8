// The flash decode's integer K·q over a q8_0 / q4_0 cache (kernels/attn_flash.h, dots_q8_0_int /
// dots_q4_0_int) with 256-bit vectors, for AVX2 and AVX-VNNI: llama.cpp's vec_dot_q8_0_q8_0 /
// vec_dot_q4_0_q8_0 order (per 32-block 8 exact int32 lanes of 4 products, acc = fma(d_k * d_q, lanes, acc),
// then hsum_float_8), read in place from the cells' rows, q given as flash_q8_row rows (the block's quants
// and lane starts are the first 32 bytes of their 64). A Lanes policy makes a block's 8 lanes for one query
// row from K's block loaded once for all rows:
//   plain AVX2 (MaddQ8 / MaddQ4): q8_0 vpmaddubsw(|k|, sign(q, k)) then vpmaddwd by ones (llama.cpp's
//   mul_sum_i8_pairs); q4_0 vpmaddubsw(nibbles, q), vpmaddwd, plus the lane starts (-8 * sum4(q));
//   AVX-VNNI (in the including file): one vpdpbusd from the lane starts (q8_0 read as k + 128).
// Every form gives the same exact lanes, so the same bits. Rows 2 at a time (8 accumulators: 4 cells x 2
// rows), 4 cells per step (past n: a repeat, dropped); dk 64 / 128 unrolled (each load one stride a tile).
//
// Included by the AVX2 files; declares its own unnamed namespace, so each ISA's file gets its own
// instantiations.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/quant/blocks.h"

namespace {

// llama.cpp's hsum_float_8 (llama_order::hsum8).
inline float flash_hsum8(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// 32 nibbles of a q4_0 block as bytes, low nibbles first (llama.cpp's bytes_from_nibbles_32).
inline __m256i flash_nibbles(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
}

struct MaddQ8 {
  using Block = opal::quant::BlockQ8_0;
  struct K {
    __m256i abs, sgn;
  };
  static K load(const Block* b) {
    const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    return {_mm256_sign_epi8(k, k), k};
  }
  static __m256i lanes(const K& k, __m256i q, __m256i /*start*/) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(k.abs, _mm256_sign_epi8(q, k.sgn)), _mm256_set1_epi16(1));
  }
};

struct MaddQ4 {
  using Block = opal::quant::BlockQ4_0;
  struct K {
    __m256i nib;
  };
  static K load(const Block* b) { return {flash_nibbles(b->qs)}; }
  static __m256i lanes(const K& k, __m256i q, __m256i start) {
    return _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(k.nib, q), _mm256_set1_epi16(1)));
  }
};

// R (1 or 2) query rows x 4 cells at a time.
template <class Lanes, int R, int NB>
void flash_dots_int_rows(const uint8_t* q8, int64_t ldq8, const uint8_t* base, uint64_t stride, const int32_t* cells,
                         int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  using Block = typename Lanes::Block;
  const int64_t nb = NB > 0 ? NB : dk / 32;
  for (int64_t r = 0; r < n; r += 4) {
    const Block* row[4];
    for (int u = 0; u < 4; ++u)
      row[u] = reinterpret_cast<const Block*>(base + uint64_t(cells[r + u < n ? r + u : r]) * stride);
    __m256 acc[R][4];
    for (int j = 0; j < R; ++j)
      for (int u = 0; u < 4; ++u) acc[j][u] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int64_t b = 0; b < nb; ++b) {
      __m256i qv[R], start[R];
      float qd[R];
      for (int j = 0; j < R; ++j) {
        const uint8_t* qj = q8 + j * ldq8;
        qv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qj + 64 * b));
        start[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qj + 64 * nb + 64 * b));
        std::memcpy(&qd[j], qj + 128 * nb + 4 * b, 4);
      }
      for (int u = 0; u < 4; ++u) {
        const typename Lanes::K k = Lanes::load(row[u] + b);
        const float dk_u = _cvtsh_ss(row[u][b].d);
        for (int j = 0; j < R; ++j) {
          const __m256 d = _mm256_set1_ps(dk_u * qd[j]);  // a product of two f16 values: exact
          acc[j][u] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(Lanes::lanes(k, qv[j], start[j])), acc[j][u]);
        }
      }
    }
    for (int j = 0; j < R; ++j)
      for (int64_t u = 0; u < 4 && r + u < n; ++u) s[j * lds + r + u] = flash_hsum8(acc[j][u]) * scale;
  }
}

template <class Lanes, int NB>
void flash_dots_int_nb(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                       const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  int64_t j = 0;
  for (; j + 2 <= m; j += 2)
    flash_dots_int_rows<Lanes, 2, NB>(q8 + j * ldq8, ldq8, base, stride, cells, n, dk, scale, s + j * lds, lds);
  if (j < m)
    flash_dots_int_rows<Lanes, 1, NB>(q8 + j * ldq8, ldq8, base, stride, cells, n, dk, scale, s + j * lds, lds);
}

template <class Lanes>
void flash_dots_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                    const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds) {
  if (dk == 64) return flash_dots_int_nb<Lanes, 2>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
  if (dk == 128) return flash_dots_int_nb<Lanes, 4>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
  flash_dots_int_nb<Lanes, 0>(q8, ldq8, m, base, stride, cells, n, dk, scale, s, lds);
}

}  // namespace
