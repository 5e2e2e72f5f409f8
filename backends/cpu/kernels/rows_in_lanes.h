// The loop nests of the "weight rows in the lanes" batch kernels, two forms:
// RowsInLanesDriver (32-row slices, AVX-512 Q4_0 in legacy_avx512.cpp, Q4_K
// and Q6_K in kquants_avx512.cpp) and SliceDriver (16-row slices, AVX2; see
// below). For RowsInLanesDriver a kernel K provides
//   kSlice (32), kActs: the tile is kSlice weight rows x kActs activation rows;
//   repack(g, row, rows, packed): rows (1 to 32) weight rows from row into
//     the thread's scratch, in the kernel's interleaved layout;
//   tile<RV, RA>(g, packed, row, act, last): RV x 16 rows x RA activation
//     rows over the whole row length, written straight to the output (the
//     last 16-row vector through the store mask `last`).
// A final slice of fewer rows is repacked with zero rows up to a multiple of
// 16 (repack must write them), computed in full and stored under a mask.
// Each slice is repacked once per call and then meets every activation row.
//
// Included by each ISA's files inside an unnamed namespace (like tile_driver.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "core/error.h"

namespace {

// Where row `row`'s block b of a Q4_0 / Q8_0 matrix lies under g.layout: its
// f16 scale and its quants in the block's own order (Q4_0's 16 nibble bytes,
// Q8_0's 32 bytes). In the row groups of 8 (kernels/repack.h) a block of a
// group holds the 8 scales, then the 8 rows' quants (Q4_0 in the order rows
// 0, 4, 1, 5, 2, 6, 3, 7); rows from the last whole group on are plain. The
// SliceDriver kernels' repack reads through it, so their prompt batches read
// the load-time layout in place.
struct BlockAt {
  const uint8_t* scale;
  const uint8_t* quants;
};
inline BlockAt legacy_block(const opal::cpu::GemmArgs& g, int64_t row, int64_t b, int block_bytes) {
  if (g.layout == opal::cpu::kLayoutRowGroups8 && row < g.n_rows / 8 * 8) {
    const uint8_t* grp = g.w + uint64_t(row / 8 * 8) * g.w_row_bytes + uint64_t(b) * 8 * uint64_t(block_bytes);
    const int i = int(row % 8);
    const int pos = block_bytes == kQ4_0Bytes ? (i % 4) * 2 + i / 4 : i;
    return {grp + 2 * i, grp + 16 + (block_bytes - 2) * pos};
  }
  const uint8_t* blk = g.w + uint64_t(row) * g.w_row_bytes + uint64_t(b) * uint64_t(block_bytes);
  return {blk, blk + 2};
}

// A Q5_0 prompt batch on kLayoutQ5Groups8 in place (stop 40; each ISA's gemm_q5_0_packed_batch): the slice's whole
// groups through groups (a rows-in-lanes driver whose repack reads them with avx2::q5_0_groups_to_lanes), the rows
// past the last group, which the layout leaves plain, through plain (layout 0).
inline void q5_0_on_whole_groups(const opal::cpu::GemmArgs& g, void (*groups)(const opal::cpu::GemmArgs&),
                                 void (*plain)(const opal::cpu::GemmArgs&)) {
  if (g.row_begin % 8 != 0)
    opal::fail("Q5_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
  const int64_t full = g.n_rows / 8 * 8;
  opal::cpu::GemmArgs whole = g;
  whole.row_end = std::min(g.row_end, full);
  if (whole.row_end > whole.row_begin) groups(whole);
  if (g.row_end > full) {
    opal::cpu::GemmArgs rest = g;
    rest.row_begin = std::max(g.row_begin, full);
    rest.layout = opal::cpu::kLayoutPlain;
    plain(rest);
  }
}

template <class K>
struct RowsInLanesDriver {
  template <int RV, int RA = K::kActs - 1>
  static void tail(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t row, int64_t act, int64_t n,
                   uint16_t last) {
    if constexpr (RA > 0) {
      if (n == RA) return K::template tile<RV, RA>(g, packed, row, act, last);
      tail<RV, RA - 1>(g, packed, row, act, n, last);
    }
  }

  template <int RV>
  static void slice(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t row, uint16_t last) {
    int64_t a = 0;
    for (; a + K::kActs <= g.n_act; a += K::kActs) K::template tile<RV, K::kActs>(g, packed, row, a, last);
    tail<RV>(g, packed, row, a, g.n_act - a, last);
  }

  static void run(const opal::cpu::GemmArgs& g) {
    static_assert(K::kSlice == 32, "slices of two 16-row vectors");
    uint8_t* packed = reinterpret_cast<uint8_t*>(g.scratch);
    int64_t r = g.row_begin;
    for (; r + 32 <= g.row_end; r += 32) {
      K::repack(g, r, 32, packed);
      slice<2>(g, packed, r, 0xFFFF);
    }
    if (r < g.row_end) {
      const int n = int(g.row_end - r);
      K::repack(g, r, n, packed);
      const uint16_t last = n % 16 == 0 ? uint16_t(0xFFFF) : uint16_t((1u << (n % 16)) - 1);
      if (n > 16) slice<2>(g, packed, r, last);
      else slice<1>(g, packed, r, last);
    }
  }
};

// The 16-row form of the AVX2 batch kernels (Q4_0 in q4_0_avx2.cpp, the Q8_0
// lanes order in legacy_avx2.cpp, Q4_K in kquants_avx2.cpp, Q4_0/Q8_0 with
// vpdpbusd in vnni_avx2vnni.cpp). A kernel K provides
//   kSlice (16), kActs: the tile is kSlice weight rows x kActs activation rows;
//   repack(g, row, rows, packed): rows (1 to kSlice) weight rows from row into
//     the thread's scratch, zero rows after them;
//   tile<RA>(g, packed, act, out16): the slice's kSlice rows x RA activation
//     rows from act over the whole row length, activation row a's kSlice
//     results stored at out16[a].
// Each slice is repacked once per call and meets every activation row in
// tiles of kActs rows, then one tile of the remaining rows. A full slice
// writes straight to the output; a final partial slice is computed into a
// local buffer and its `rows` results copied out.
template <class K>
struct SliceDriver {
  template <int RA = K::kActs - 1>
  static void tail(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t act, int n, float* out16[]) {
    if constexpr (RA > 0) {
      if (n == RA) return K::template tile<RA>(g, packed, act, out16);
      tail<RA - 1>(g, packed, act, n, out16);
    }
  }

  // One repacked slice of `rows` weight rows from `row` against every activation row.
  static void slice(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t row, int rows) {
    alignas(32) float tmp[K::kActs][K::kSlice];
    float* out16[K::kActs];
    const bool full = rows == K::kSlice;
    auto put = [&](int64_t act, int n) {  // targets of n activation rows from act
      for (int a = 0; a < n; ++a) out16[a] = full ? g.out + (act + a) * g.out_stride + row : tmp[a];
    };
    auto flush = [&](int64_t act, int n) {
      if (full) return;
      for (int a = 0; a < n; ++a) std::memcpy(g.out + (act + a) * g.out_stride + row, tmp[a], sizeof(float) * rows);
    };
    int64_t a = 0;
    for (; a + K::kActs <= g.n_act; a += K::kActs) {
      put(a, K::kActs);
      K::template tile<K::kActs>(g, packed, a, out16);
      flush(a, K::kActs);
    }
    const int n = int(g.n_act - a);
    put(a, n);
    tail(g, packed, a, n, out16);
    flush(a, n);
  }

  static void run(const opal::cpu::GemmArgs& g) {
    uint8_t* packed = reinterpret_cast<uint8_t*>(g.scratch);
    for (int64_t r = g.row_begin; r < g.row_end; r += K::kSlice) {
      const int rows = int(std::min<int64_t>(K::kSlice, g.row_end - r));
      K::repack(g, r, rows, packed);
      slice(g, packed, r, rows);
    }
  }
};

}  // namespace
