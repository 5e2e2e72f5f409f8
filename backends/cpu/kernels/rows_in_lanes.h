// The loop nest of the "weight rows in the lanes" batch kernels (AVX-512
// Q4_0 in legacy_avx512.cpp, Q4_K and Q6_K in kquants_avx512.cpp). A kernel K
// provides
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
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

namespace {

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

}  // namespace
