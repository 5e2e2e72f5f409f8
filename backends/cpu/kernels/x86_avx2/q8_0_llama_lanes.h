// Q8_0 prompts in llama.cpp's 8-lane order with the weight rows in the lanes,
// for AVX2 and AVX-VNNI: the 256-bit form of AVX-512's Q8_0LlamaLanes
// (legacy_avx512.cpp). A Dot policy makes the int32 lanes: Avx2LaneDot
// (legacy_avx2.cpp, plain AVX2) or VnniLaneDot (vnni_avx2vnni.cpp).
//
// Order: llama.cpp gives int32 lane l of a (weight row, activation row) block
// the exact sum of elements 4l..4l+3, then acc_l = fma(float(lane), d_w * d_x,
// acc_l) block by block, and hsum8 at the end. Here one vector holds the 8
// quants of groups 2m and 2m+1 of 4 weight rows (int32 lane 2i + e: row i,
// group 2m + e); the activation's same 8 quants, broadcast, meet them in the
// Dot: lanes 2m and 2m+1 of 4 pairs, exact. Each (activation row, m) keeps its
// own float accumulator, and the 4 rows' d_w * d_x take one multiply a block.
// hsum8's tree becomes vertical adds of the 4 accumulators and one add of
// neighbouring lanes: the same bits.
//
// float(lane) without vcvtdq2ps: the Dot's lanes carry kFloatBias, the bits of
// 1.5 * 2^23, so their bits are the float 1.5 * 2^23 + lane (|lane| <= 4 * 128
// * 128 < 2^22 stays in that binade) and one vsubps of 1.5 * 2^23 leaves the
// lane exactly, the converted value. On Intel the convert shares ports 0 and
// 1 with the multiplies and the FMA; the subtraction (and the bias's vpaddd)
// also run on port 5.
//
// The repack (per call, activation chunk of 64 rows and 4-row slice, from the
// GGUF rows or the row groups) is a qword transpose of the 4 rows' blocks: per
// block the 4 rows' f32 scales, each twice (32 bytes), then per m the quants
// and the Dot's companion of them (32 bytes each: VNNI's biased lane starts,
// AVX2's |w|). Tiles of 4 weight rows x 2 activation rows (8 float
// accumulators); per m the weights and their companion are loaded once for
// both activation rows.
//
// Included by the AVX2 files; declares its own unnamed namespace (like
// tile_driver.h), so each ISA's file gets its own instantiations.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "core/error.h"

namespace {

constexpr int32_t kFloatBias = 0x4B400000;  // 1.5 * 2^23 as f32: int32 lanes started at it read as floats

// Dot: companion(v) -> what the repack stores beside v (4 rows' groups 2m, 2m+1 as qwords);
// act_quants(g, row) -> an activation row's quants, kActBlockBytes a block (m's 8 at + 8 * m);
// lanes(w, companion, x8) -> kFloatBias + the exact lanes (x8: the 8 activation quants broadcast);
// check(g) fails on activation rows the Dot cannot read.
template <class Dot>
struct Q8_0LlamaLanes {
  static constexpr int kRows = 4, kActs = 2;
  static constexpr int kBlockBytes = 32 + 4 * 64;
  static constexpr int64_t kChunk = 64;  // activation rows a slice meets while they stay in L2

  // rows (1 to 4) weight rows from row, zero rows after them.
  static void repack(const opal::cpu::GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      alignas(16) uint16_t s[8] = {};
      __m256i q[4];
      for (int r = 0; r < 4; ++r) {
        if (r >= rows) {
          q[r] = _mm256_setzero_si256();
          continue;
        }
        const BlockAt at = legacy_block(g, row + r, b, kQ8_0Bytes);
        std::memcpy(&s[r], at.scale, 2);
        q[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at.quants));
      }
      const __m256 scales = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(s))));
      _mm256_storeu_ps(reinterpret_cast<float*>(pb), _mm256_permutevar8x32_ps(scales, twice));
      // Qwords: t0 holds rows 0, 1 of m = 0 (low half) and m = 2 (high), t1 of m = 1 and 3; t2, t3 rows 2, 3.
      const __m256i t0 = _mm256_unpacklo_epi64(q[0], q[1]), t1 = _mm256_unpackhi_epi64(q[0], q[1]);
      const __m256i t2 = _mm256_unpacklo_epi64(q[2], q[3]), t3 = _mm256_unpackhi_epi64(q[2], q[3]);
      const __m256i v[4] = {_mm256_permute2x128_si256(t0, t2, 0x20), _mm256_permute2x128_si256(t1, t3, 0x20),
                            _mm256_permute2x128_si256(t0, t2, 0x31), _mm256_permute2x128_si256(t1, t3, 0x31)};
      for (int m = 0; m < 4; ++m) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 + 64 * m), v[m]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 64 + 64 * m), Dot::companion(v[m]));
      }
    }
  }

  // The slice's 4 rows x RA activation rows from act; out[a] takes 4 results.
  template <int RA>
  static void tile(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t act, float* out[]) {
    const int64_t nb = g.k / 32;
    const uint8_t* xq[RA];
    const float* xd[RA];
    const __m256 bias_f32 = _mm256_castsi256_ps(_mm256_set1_epi32(kFloatBias));
    for (int a = 0; a < RA; ++a) {
      const uint8_t* row = g.act + uint64_t(act + a) * g.act_row_bytes;
      xd[a] = reinterpret_cast<const float*>(row + nb * kQ8_0Bytes);
      xq[a] = Dot::act_quants(g, row);
    }
    __m256 acc[RA][4];
    for (int a = 0; a < RA; ++a)
      for (int m = 0; m < 4; ++m) acc[a][m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const __m256 wd = _mm256_loadu_ps(reinterpret_cast<const float*>(pb));
      __m256 d[RA];
      for (int a = 0; a < RA; ++a) d[a] = _mm256_mul_ps(wd, _mm256_broadcast_ss(xd[a] + b));
      for (int m = 0; m < 4; ++m) {
        __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32 + 64 * m));
        __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 64 + 64 * m));
        asm("" : "+x"(w), "+x"(c));  // one load each, not one per activation row (load-bound otherwise)
        for (int a = 0; a < RA; ++a) {
          int64_t eight;
          std::memcpy(&eight, xq[a] + b * Dot::kActBlockBytes + 8 * m, 8);
          const __m256i lanes = Dot::lanes(w, c, _mm256_set1_epi64x(eight));
          const __m256 exact = _mm256_sub_ps(_mm256_castsi256_ps(lanes), bias_f32);  // float(lane), exactly
          acc[a][m] = _mm256_fmadd_ps(exact, d[a], acc[a][m]);
        }
      }
    }
    // hsum8's tree: lanes (l0 + l4) + (l2 + l6) and (l1 + l5) + (l3 + l7) side by side, then their sum.
    const __m256i evens = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int a = 0; a < RA; ++a) {
      const __m256 u = _mm256_add_ps(_mm256_add_ps(acc[a][0], acc[a][2]), _mm256_add_ps(acc[a][1], acc[a][3]));
      const __m256 s = _mm256_add_ps(u, _mm256_permute_ps(u, 0xB1));
      _mm_storeu_ps(out[a], _mm256_castps256_ps128(_mm256_permutevar8x32_ps(s, evens)));
    }
  }

  // Every activation row in chunks of kChunk; per chunk each 4-row slice of the thread's rows is repacked into the
  // scratch and meets the chunk in tiles of kActs rows (a partial last slice through a local buffer).
  static void run(const opal::cpu::GemmArgs& g) {
    if (g.layout == opal::cpu::kLayoutRowGroups8 && g.row_begin % 8 != 0)
      opal::fail("Q8_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
    Dot::check(g);
    uint8_t* packed = reinterpret_cast<uint8_t*>(g.scratch);
    for (int64_t a0 = 0; a0 < g.n_act; a0 += kChunk) {
      const int64_t a1 = std::min(g.n_act, a0 + kChunk);
      for (int64_t r = g.row_begin; r < g.row_end; r += kRows) {
        const int rows = int(std::min<int64_t>(kRows, g.row_end - r));
        repack(g, r, rows, packed);
        alignas(16) float tmp[kActs][kRows];
        float* out[kActs];
        for (int64_t a = a0; a < a1; a += kActs) {
          const int n = int(std::min<int64_t>(kActs, a1 - a));
          for (int i = 0; i < n; ++i) out[i] = rows == kRows ? g.out + (a + i) * g.out_stride + r : tmp[i];
          if (n == 2) tile<2>(g, packed, a, out);
          else tile<1>(g, packed, a, out);
          if (rows < kRows)
            for (int i = 0; i < n; ++i) std::memcpy(g.out + (a + i) * g.out_stride + r, tmp[i], sizeof(float) * rows);
        }
      }
    }
  }
};

}  // namespace
