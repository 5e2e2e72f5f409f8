// The loop nest shared by the SIMD gemm kernels: a kernel provides
//   template <int RW, int RA> static void tile(const GemmArgs&, int64_t row, int64_t act)
// computing out[act + a][row + i] for i < RW, a < RA over the whole row length,
// and drive<Kernel, RW, RA>() covers the thread's slice of weight rows with
// RW x RA tiles (remainders with RW x 1, 1 x RA and 1 x 1 tiles). Activation
// rows are taken in chunks of kActChunk so that a chunk's converted rows stay
// in L2 while every weight tile of the slice passes over them; for decode
// (n_act = 1) this is a single stream over the weight rows.
//
// Included by each ISA's files inside an unnamed namespace, so every ISA gets
// its own instantiations (compiled with its own flags, never merged by the linker).
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

namespace {

constexpr int64_t kActChunk = 64;

template <class Kernel, int RW, int RA>
void drive(const opal::cpu::GemmArgs& g) {
  for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
    const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
    int64_t r = g.row_begin;
    for (; r + RW <= g.row_end; r += RW) {
      int64_t a = a0;
      for (; a + RA <= a1; a += RA) Kernel::template tile<RW, RA>(g, r, a);
      for (; a < a1; ++a) Kernel::template tile<RW, 1>(g, r, a);
    }
    for (; r < g.row_end; ++r) {
      int64_t a = a0;
      for (; a + RA <= a1; a += RA) Kernel::template tile<1, RA>(g, r, a);
      for (; a < a1; ++a) Kernel::template tile<1, 1>(g, r, a);
    }
  }
}

// The entry point for a MatmulKernels table: tiles of RW x RA for prompt
// batches, DW x 1 for decode.
template <class Kernel, int RW, int RA, int DW>
void gemm_entry(const opal::cpu::GemmArgs& g) {
  if (g.n_act == 1) drive<Kernel, DW, 1>(g);
  else drive<Kernel, RW, RA>(g);
}

inline int64_t no_scratch(int64_t) { return 0; }

}  // namespace
