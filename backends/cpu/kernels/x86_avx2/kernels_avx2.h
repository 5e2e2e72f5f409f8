// The AVX2 (+FMA, F16C) kernels, one file per concern, same layout as
// x86_avx512/ (see kernels_avx512.h). AVX2 has no vpdpbusd: u8 x s8 products
// go through vpmaddubsw (int16 pair sums, which cannot saturate for the value
// ranges used here) and vpmaddwd. Only the *_avx2.cpp files get AVX2 flags,
// and -mno-avx512f, so they run on any AVX2 CPU even in a -march=native build.
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

namespace opal::cpu::avx2 {

void convert_q8_0(DType act_type, const float* x, uint8_t* dst, int64_t k);
// Q8_0 blocks followed by the row's block scales (f32) and block sums (int32).
void convert_q8_0_sums(DType act_type, const float* x, uint8_t* dst, int64_t k);
uint64_t q8_0_sums_row_bytes(int64_t k);
// Per-thread scratch of the Q4_0 gemm (a repacked slice of weight rows).
int64_t q4_0_scratch_floats(int64_t k);
// Per-thread scratch of the Q4_K gemm (a repacked slice of weight rows).
int64_t q4_K_scratch_floats(int64_t k);
// Per-thread scratch of the Q6_K gemm (a repacked slice of weight rows).
int64_t q6_K_scratch_floats(int64_t k);
// Per-thread scratch of the Q5_0 gemm (a repacked slice of weight rows).
int64_t q5_0_scratch_floats(int64_t k);
// Per-thread scratch of the Q8_0 gemm (a repacked slice for the lanes order).
int64_t q8_0_scratch_floats(int64_t k);
void convert_q8_K(DType act_type, const float* x, uint8_t* dst, int64_t k);
// out[i] = x[i] rounded to f16 (nearest even) and back (vcvtps2ph).
void round_f16(const float* x, float* out, int64_t k);
void gemm_q4_0(const GemmArgs& g);
void gemm_q5_0(const GemmArgs& g);
// Whether a Q5_0 gemm runs in the block-exact order (stop 25): where the lanes
// order is selected (lanes_order(Q5_0): auto and lanes), the kernel has its
// scratch and the rows are not expert rows (single_rows: llama.cpp's vec_dot
// order), at every batch size, on the row groups and the plain layout alike;
// llama.cpp's 8-lane order otherwise.
bool q5_0_block_exact(const GemmArgs& g);
// The AVX2 / AVX-VNNI row groups' software prefetch along the stream (16 KiB on) and the request of a slice's first
// 16 KiB: batches of kStreamPrefetchMinActs activation rows or more, and smaller calls (decode, short drafts) where
// decode_prefetch() says so (matmul_kernels.h: by default every host but AMD's AVX-512 cores). On Zen 4 (`--isa avx2`)
// calls of 1-3 rows ran faster without since stops 27 (Q8_0 decode), 40 (Q4_0), 41 (Q5_0 and batches of 2-3 rows:
// alternated run by run in one process, SmolLM2-135M / Qwen3-0.6B Q8_0 and SmolLM2 Q4_K_M (its Q5_0) 2 rows 1.10-1.13x
// without at one thread and 1.04-1.06x at two, 3 rows 1.05-1.12x / 0.98-1.05x; 4 rows 1.03-1.05x at one thread but
// 0.94-1.00x at two, 16 rows 0.93-0.98x; docs/perf/cpu-round2g.md); on a Zen 3 (AVX2 only, stop 42) decode ran
// 1.15-1.24x faster with it (Q8_0 / Q4_0 at one thread).
constexpr int64_t kStreamPrefetchMinActs = 4;
inline bool wants_stream_prefetch(const GemmArgs& g) { return g.n_act >= kStreamPrefetchMinActs || decode_prefetch(); }
// The slice head only with the batches: a decode that prefetches the stream requests none (stop 42, Zen 3, token by
// token: one thread level, two threads SmolLM2-135M 1.02-1.07x without; as on Zen 4 at two threads, stop 41).
inline bool wants_head_request(const GemmArgs& g) { return g.n_act >= kStreamPrefetchMinActs; }
void gemm_q8_0(const GemmArgs& g);
void gemm_q4_K(const GemmArgs& g);
// Whether a Q4_K gemm of 1-3 activation rows runs in the super-block-exact
// (lanes) order (stop 26): where the lanes order is selected (lanes_order(Q4_K):
// auto and lanes), the kernel has its scratch and the rows are not expert rows,
// on the row groups and the plain layout alike; llama.cpp's 8-lane vec_dot
// order otherwise. (Batches of 4 or more take the lanes order in any case.)
bool q4_K_super_block_exact(const GemmArgs& g);
void gemm_q5_K(const GemmArgs& g);
void gemm_q6_K(const GemmArgs& g);
void gemm_f32(const GemmArgs& g);
void gemm_f16(const GemmArgs& g);
void gemm_bf16(const GemmArgs& g);
// Q8_0 / Q4_0 weights in row groups of 8 (kernels/repack.h; row_groups_avx2.cpp):
// decode and small batches; the plain rows after the last group go to gemm_q8_0 /
// gemm_q4_0 (the _vnni forms: avx2vnni's, on its convert_q8_0_sums activation rows).
void gemm_q8_0_groups(const GemmArgs& g);
void gemm_q4_0_groups(const GemmArgs& g);
void gemm_q8_0_groups_vnni(const GemmArgs& g);
void gemm_q4_0_groups_vnni(const GemmArgs& g);
// Q5_0 weights in row groups of 8 (kernels/repack.h; row_groups_avx2.cpp, stop 15):
// decode and batches of up to 16 rows (llama.cpp's order, as the plain kernels'); the
// plain rows after the last group go to gemm_q5_0 (avx2vnni's form: row_groups_avx2vnni.cpp).
void gemm_q5_0_groups(const GemmArgs& g);
// Larger Q5_0 batches on the groups in place (stop 40, gemm_packed_batch): in the block-exact order (q5_0_block_exact)
// Q5_0Lanes, its repack reading whole groups through q5_0_groups_to_lanes, the rows past the last group plain;
// false in llama.cpp's order (MUL_MAT unpacks then).
bool gemm_q5_0_packed_batch(const GemmArgs& g);
// Whole groups [row, row + rows) of a kLayoutQ5Groups8 weight (row and rows multiples of 8, rows <= slice) into the
// rows-in-lanes slice form (Q5_0Lanes, avx2vnni's and avx512's RowsInLanes<Q5_0Weights>): per block (block_bytes
// apart) the rows' f32 scales, then lane L (elements 4L .. 4L + 3) of row r's unsigned 5-bit quants at 4 * slice +
// 4 * (L * slice + r); rows up to a multiple of 16 zeroed. Plain AVX2 (q5_0_groups.h's unpack), for every x86 ISA.
void q5_0_groups_to_lanes(const GemmArgs& g, int64_t row, int rows, int slice, int block_bytes, uint8_t* packed);
// Q4_K / Q6_K weights in K-quant row groups of 8 (kernels/repack.h kLayoutKGroups8;
// kquant_groups_avx2.cpp): decode and batches of up to 3 rows; the plain rows after the
// last group go to gemm_q4_K / gemm_q6_K (avx2vnni's forms: kquant_groups_avx2vnni.cpp).
// The _batch forms (gemm_packed_batch): larger batches on the groups in place, in the
// plain batch kernels' lanes order (false without a scratch: the plain path then).
void gemm_q4_K_groups(const GemmArgs& g);
void gemm_q6_K_groups(const GemmArgs& g);
bool gemm_q4_K_groups_batch(const GemmArgs& g);
bool gemm_q6_K_groups_batch(const GemmArgs& g);
// Prompt batches (more than packed_max_act rows) on the Q8_0 / Q4_0 row groups, read
// in place (MatmulKernels::gemm_packed_batch): false for a batch they leave to the
// unpacked path (the lanes order of Q8_0).
bool gemm_q8_0_packed_batch(const GemmArgs& g);
bool gemm_q4_0_packed_batch(const GemmArgs& g);

}  // namespace opal::cpu::avx2

// AVX-VNNI batches (vnni_avx2vnni.cpp; the avx2-vnni ISA): Q4_0, Q5_0 and Q8_0 on
// convert_q8_0_sums activation rows, decode and small batches on the avx2 kernels.
namespace opal::cpu::avx2vnni {

int64_t scratch_floats(int64_t k);
// Q8_0's activation rows: convert_q8_0_sums rows, then the quants flipped to
// x + 128 (x xor 0x80), 32 bytes a block: Q8_0LlamaLanes' unsigned operand.
uint64_t q8_0_flipped_row_bytes(int64_t k);
void convert_q8_0_flipped(DType act_type, const float* x, uint8_t* dst, int64_t k);
void gemm_q4_0(const GemmArgs& g);
void gemm_q5_0(const GemmArgs& g);
void gemm_q8_0(const GemmArgs& g);
bool gemm_q8_0_packed_batch(const GemmArgs& g);
bool gemm_q4_0_packed_batch(const GemmArgs& g);
// Q4_K / Q6_K batches (kquants_avx2vnni.cpp), on the avx2 Q8_K activation rows.
int64_t q4_K_scratch_floats(int64_t k);
int64_t q6_K_scratch_floats(int64_t k);
void gemm_q4_K(const GemmArgs& g);
void gemm_q6_K(const GemmArgs& g);
// Q5_0 weights in row groups of 8 (row_groups_avx2vnni.cpp): decode and batches of up to 16 rows.
void gemm_q5_0_groups(const GemmArgs& g);
// Larger Q5_0 batches on the groups in place (stop 40): avx2::gemm_q5_0_packed_batch's with RowsInLanes.
bool gemm_q5_0_packed_batch(const GemmArgs& g);
// Q4_K / Q6_K weights in K-quant row groups of 8 (kquant_groups_avx2vnni.cpp, vpdpwssd):
// decode and batches of up to 3 rows; larger batches in place (the _batch forms).
void gemm_q4_K_groups(const GemmArgs& g);
void gemm_q6_K_groups(const GemmArgs& g);
bool gemm_q4_K_groups_batch(const GemmArgs& g);
bool gemm_q6_K_groups_batch(const GemmArgs& g);

}  // namespace opal::cpu::avx2vnni
