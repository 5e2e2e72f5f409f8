// The AVX-512 (F/BW/VL/DQ + VNNI) kernels, one file per concern:
//   act_avx512.cpp     activation quantization to Q8_0 / Q8_K (bytes equal to core/quant's)
//   legacy_avx512.cpp  Q4_0, Q5_0, Q8_0 weights x Q8_0 activations
//   row_groups_avx512.cpp Q8_0, Q4_0 decode from the load-time row groups (kernels/repack.h)
//   kquants_avx512.cpp Q4_K, Q5_K, Q6_K weights x Q8_K activations
//   float_avx512.cpp   F32, F16, BF16 weights x f32 activations rounded through the weight type
//   table.cpp          the table entries (compiled without ISA flags: it may run on any CPU)
// Only the *_avx512.cpp files are compiled with AVX-512 flags (CMakeLists.txt).
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

// GCC 12's AVX-512 headers build some results from deliberately undefined
// vectors (_mm512_undefined_*), which -Wuninitialized reports at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace opal::cpu::avx512 {

void convert_q8_0(DType act_type, const float* x, uint8_t* dst, int64_t k);
// Q8_0 blocks followed by the row's block scales (f32) and block sums (int32).
void convert_q8_0_sums(DType act_type, const float* x, uint8_t* dst, int64_t k);
uint64_t q8_0_sums_row_bytes(int64_t k);
// The Q8_0 weights' rows: the sums form, then each block's quants xor 0x80 (unsigned, x + 128).
void convert_q8_0_flipped(DType act_type, const float* x, uint8_t* dst, int64_t k);
uint64_t q8_0_flipped_row_bytes(int64_t k);
// Per-thread scratch of the Q4_0 gemm (a repacked slice of weight rows).
int64_t legacy_scratch_floats(int64_t k);
int64_t q4_K_scratch_floats(int64_t k);
int64_t q6_K_scratch_floats(int64_t k);
void convert_q8_K(DType act_type, const float* x, uint8_t* dst, int64_t k);
// out[i] = x[i] rounded to f16 (nearest even) and back (vcvtps2ph).
void round_f16(const float* x, float* out, int64_t k);
void gemm_q4_0(const GemmArgs& g);
void gemm_q5_0(const GemmArgs& g);
void gemm_q8_0(const GemmArgs& g);
// Q8_0 / Q4_0 weights in row groups of 8 (kLayoutRowGroups8), up to 16 activation rows.
void gemm_q8_0_groups(const GemmArgs& g);
void gemm_q4_0_groups(const GemmArgs& g);
// Larger Q4_0 / Q8_0 batches on the row groups in place (gemm_packed_batch, stop 33; legacy_avx512.cpp): the plain
// prompt kernels, their repack reading the groups; false where they decline (MUL_MAT unpacks then).
bool gemm_q4_0_packed_batch(const GemmArgs& g);
bool gemm_q8_0_packed_batch(const GemmArgs& g);
// Q5_0 weights in row groups of 8 (kLayoutQ5Groups8 since stop 40; row_groups_avx512.cpp), up to 16 activation
// rows; in the block-exact order where avx2::q5_0_block_exact, else llama.cpp's.
void gemm_q5_0_groups(const GemmArgs& g);
// Larger Q5_0 batches on the groups in place (stop 40, gemm_packed_batch): in the lanes order RowsInLanes,
// its repack reading whole groups through avx2::q5_0_groups_to_lanes (the rows past the last group plain); false in
// llama.cpp's order (MUL_MAT unpacks then).
bool gemm_q5_0_packed_batch(const GemmArgs& g);
void gemm_q4_K(const GemmArgs& g);
void gemm_q5_K(const GemmArgs& g);
void gemm_q6_K(const GemmArgs& g);
// Q4_K / Q6_K weights in K-quant row groups of 8 (kernels/repack.h: kLayoutQ4KGroups8Wide /
// kLayoutQ6KGroups8Wide since stop 39, another layout an error;
// kquant_groups_avx512.cpp): decode and batches of up to 4 rows (the plain kernels' bits);
// the plain rows after the last group go to gemm_q4_K / gemm_q6_K. The _batch forms
// (gemm_packed_batch): larger batches on the groups in place, in the plain batch
// kernels' lanes order (false without a scratch: the plain path then).
void gemm_q4_K_groups(const GemmArgs& g);
void gemm_q6_K_groups(const GemmArgs& g);
bool gemm_q4_K_groups_batch(const GemmArgs& g);
bool gemm_q6_K_groups_batch(const GemmArgs& g);
// The plain rows-in-lanes batch kernels (kquants_avx512.cpp) reading the groups in place (stop 34); false where
// they decline (no scratch, batches of up to 4 rows, a weight not in a K-quant group layout); a slice that does not
// hold whole groups is an error.
bool gemm_q4_K_groups_rows_in_lanes(const GemmArgs& g);
bool gemm_q6_K_groups_rows_in_lanes(const GemmArgs& g);
void gemm_f32(const GemmArgs& g);
void gemm_f16(const GemmArgs& g);
void gemm_bf16(const GemmArgs& g);

}  // namespace opal::cpu::avx512
