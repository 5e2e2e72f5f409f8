// The loop nest of the "weight rows in the lanes" batch kernels (AVX-512
// Q4_0 in legacy_avx512.cpp, Q4_K and Q6_K in kquants_avx512.cpp). A kernel K
// provides
//   kSlice (32), kActs: the tile is kSlice weight rows x kActs activation rows;
//   repack(g, row, rows, packed): rows (16 or 32) weight rows from row into
//     the thread's scratch, in the kernel's interleaved layout;
//   tile<RV, RA>(g, packed, row, act): RV x 16 rows x RA activation rows over
//     the whole row length, written straight to the output;
//   rest(g): the last rows of the slice (fewer than 16) in the kernel's
//     ordinary layout.
// Each slice is repacked once per call and then meets every activation row.
//
// Included by each ISA's files inside an unnamed namespace (like tile_driver.h).
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

namespace {

template <class K>
struct RowsInLanesDriver {
  template <int RV, int RA = K::kActs - 1>
  static void tail(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t row, int64_t act, int64_t n) {
    if constexpr (RA > 0) {
      if (n == RA) return K::template tile<RV, RA>(g, packed, row, act);
      tail<RV, RA - 1>(g, packed, row, act, n);
    }
  }

  template <int RV>
  static void slice(const opal::cpu::GemmArgs& g, const uint8_t* packed, int64_t row) {
    int64_t a = 0;
    for (; a + K::kActs <= g.n_act; a += K::kActs) K::template tile<RV, K::kActs>(g, packed, row, a);
    tail<RV>(g, packed, row, a, g.n_act - a);
  }

  static void run(const opal::cpu::GemmArgs& g) {
    uint8_t* packed = reinterpret_cast<uint8_t*>(g.scratch);
    int64_t r = g.row_begin;
    for (; r + K::kSlice <= g.row_end; r += K::kSlice) {
      K::repack(g, r, K::kSlice, packed);
      slice<K::kSlice / 16>(g, packed, r);
    }
    if (r + 16 <= g.row_end) {
      K::repack(g, r, 16, packed);
      slice<1>(g, packed, r);
      r += 16;
    }
    if (r < g.row_end) {
      opal::cpu::GemmArgs rest = g;
      rest.row_begin = r;
      K::rest(rest);
    }
  }
};

}  // namespace
