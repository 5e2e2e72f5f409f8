// Q8_0 prompt tiles in llama.cpp's 8-lane order for plain AVX2, on weights
// in the GGUF layout or in the load-time row groups of 8 (kernels/repack.h,
// kLayoutRowGroups8), read in place: no unpacking. Since stop 48 only where a
// call brings no scratch: with one, avx2 and avx2-vnni put the weight rows in
// the lanes (q8_0_llama_lanes.h), 0.87-0.94 of these tiles' time on avx2.
//
// Order (the same as LegacyKernel in legacy_avx2.cpp and the reference):
// per (weight row, activation row) pair and 32-element block, the 8 int32
// lanes (lane j: elements 4j..4j+3, exact), converted to float and
// accumulated as acc = fma(float(lanes), d_w * d_x, acc); hsum8 at the end of
// the row. Avx2Dot makes the lanes with vpmaddubsw(|w|, sign(x, w)) then
// vpmaddwd by ones.
//
// Layout read (Rows): row r's block b is its f16 scale at scale(r) + b *
// stride and its 32 quants at quants(r) + b * stride; the GGUF layout has
// stride 34 (scale, then quants), the row groups stride 8 * 34 = 272 with the
// group's 8 scales first (16 bytes) and the 8 rows' quants after them, so
// the 4 scales of a tile's rows are one 8-byte load there.
//
// Less work per pair than LegacyKernel: the activation scales are the f32
// of convert_q8_0_sums rows (no f16 conversion per block), the 4 rows' scales
// are converted by one vcvtph2ps and multiplied by an activation's scale in
// one vmulps (4 products), stored once per block and activation row, and each
// pair's d_w * d_x reaches its FMA by a broadcast load of them: a pair's
// vpmaddubsw, vpmaddwd and FMA share two pipes (docs/cpu-kernels.md, "Where
// the AVX2 Q8_0 pair's time goes"), so the spread is left to the load ports.
// Tiles of 4 weight rows x 2 activation rows (8 float accumulators),
// so a tile never straddles a row group; on the GGUF layout the 4 scales are
// gathered (vpinsrw).
//
// Included by the AVX2 files; declares its own unnamed namespace (like
// tile_driver.h), so each ISA's file gets its own instantiations.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace {

// The plain AVX2 block dot: 8 exact int32 lanes of 4 products each.
struct Avx2Dot {
  struct X {
    __m256i q;
  };
  struct W {
    __m256i q, abs;
  };
  // Block b of an activation row of nb blocks (convert_q8_0_sums).
  static X act(const uint8_t* row, int64_t b) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kQ8_0Bytes + 2))};
  }
  static W weights(const uint8_t* quants) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants));
    return {q, _mm256_abs_epi8(q)};
  }
  static __m256i dot(const W& w, const X& x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x.q, w.q)), _mm256_set1_epi16(1));
  }
};

// Where a tile's RW rows keep their blocks.
template <int RW>
struct TileRows {
  const uint8_t* scale[RW];
  const uint8_t* quants[RW];
  uint64_t stride = 0;
  bool contiguous_scales = false;  // the RW scales of a block are adjacent f16 (row groups)
};

template <int RW>
TileRows<RW> plain_rows(const opal::cpu::GemmArgs& g, int64_t row) {
  TileRows<RW> t;
  for (int i = 0; i < RW; ++i) {
    t.scale[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    t.quants[i] = t.scale[i] + 2;
  }
  t.stride = kQ8_0Bytes;
  return t;
}

// Rows row..row+RW-1 of one group of 8 (row % 8 + RW <= 8).
template <int RW>
TileRows<RW> group_rows(const opal::cpu::GemmArgs& g, int64_t row) {
  TileRows<RW> t;
  const uint8_t* grp = g.w + uint64_t(row / 8 * 8) * g.w_row_bytes;
  for (int i = 0; i < RW; ++i) {
    const int64_t in = row % 8 + i;
    t.scale[i] = grp + 2 * in;
    t.quants[i] = grp + 16 + 32 * in;
  }
  t.stride = 8 * kQ8_0Bytes;
  t.contiguous_scales = true;
  return t;
}

template <class Dot>
struct Q8_0LlamaTiles {
  // The RW (<= 4) rows' block scales at offset o as f32 in lanes 0..3.
  template <int RW>
  static __m128 row_scales(const TileRows<RW>& w, uint64_t o) {
    __m128i h;
    if (RW == 4 && w.contiguous_scales) {
      h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scale[0] + o));
    } else {
      uint16_t s[4] = {0, 0, 0, 0};
      for (int i = 0; i < RW; ++i) std::memcpy(&s[i], w.scale[i] + o, 2);
      h = _mm_setr_epi16(short(s[0]), short(s[1]), short(s[2]), short(s[3]), 0, 0, 0, 0);
    }
    return _mm_cvtph_ps(h);
  }

  // RW weight rows x RA activation rows (convert_q8_0_sums rows) from act, over the whole row length.
  template <int RW, int RA>
  static void tile(const opal::cpu::GemmArgs& g, const TileRows<RW>& w, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    const float* xd[RA];
    for (int a = 0; a < RA; ++a) {
      x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
      xd[a] = reinterpret_cast<const float*>(x[a] + nb * kQ8_0Bytes);
    }
    __m256 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint64_t o = uint64_t(b) * w.stride;
      typename Dot::X xq[RA];
      alignas(16) float dm[RA][4];
      const __m128 wd4 = row_scales<RW>(w, o);
      for (int a = 0; a < RA; ++a) _mm_store_ps(dm[a], _mm_mul_ps(wd4, _mm_broadcast_ss(xd[a] + b)));
      for (int a = 0; a < RA; ++a) xq[a] = Dot::act(x[a], b);
      asm("" : "+m"(dm));  // the products are read back by broadcast loads
      for (int i = 0; i < RW; ++i) {
        const typename Dot::W q = Dot::weights(w.quants[i] + o);
        for (int a = 0; a < RA; ++a)
          acc[i][a] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(q, xq[a])), _mm256_broadcast_ss(&dm[a][i]), acc[i][a]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = hsum8(acc[i][a]);
  }

  template <int RW>
  static void rows(const opal::cpu::GemmArgs& g, const TileRows<RW>& w, int64_t row, int64_t a0, int64_t a1) {
    int64_t a = a0;
    for (; a + 2 <= a1; a += 2) tile<RW, 2>(g, w, row, a);
    if (a < a1) tile<RW, 1>(g, w, row, a);
  }

  // The thread's rows [row_begin, row_end) against every activation row, in
  // chunks of about 64 activation rows, whole tiles (they stay in L2 while the rows pass).
  // g.layout: kLayoutPlain, or kLayoutRowGroups8 with g.n_rows the matrix's
  // rows (rows from the last whole group on are plain) and row_begin on a group.
  static void run(const opal::cpu::GemmArgs& g) {
    const bool groups = g.layout == opal::cpu::kLayoutRowGroups8;
    if (groups && g.row_begin % 8 != 0)
      opal::fail("Q8_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
    const int64_t grouped_end = groups ? std::min(g.row_end, g.n_rows / 8 * 8) : g.row_begin;
    constexpr int64_t kChunk = 64;
    for (int64_t a0 = 0; a0 < g.n_act; a0 += kChunk) {
      const int64_t a1 = std::min(g.n_act, a0 + kChunk);
      int64_t r = g.row_begin;
      for (; r + 4 <= grouped_end; r += 4) rows<4>(g, group_rows<4>(g, r), r, a0, a1);
      for (; r + 4 <= g.row_end; r += 4) rows<4>(g, plain_rows<4>(g, r), r, a0, a1);
      switch (g.row_end - r) {
        case 3: rows<3>(g, plain_rows<3>(g, r), r, a0, a1); break;
        case 2: rows<2>(g, plain_rows<2>(g, r), r, a0, a1); break;
        case 1: rows<1>(g, plain_rows<1>(g, r), r, a0, a1); break;
        default: break;
      }
    }
  }
};

}  // namespace
