// The table of matrix-multiplication kernels, one entry per weight dtype,
// chosen at load time. A faster kernel (AVX2, AVX-512, NEON) replaces the
// entry's functions without touching the ops: ops/matmul.cpp only calls
// through this table.
//
// Activations: llama.cpp converts the f32 activations of a matmul to the
// weight type's "vec_dot type" before the dot products (f16 for f16 weights,
// bf16 for bf16, Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the
// K-quants). Each entry converts a row of activations into its own packed
// format (convert_act, act_row_bytes), and its gemm reads that format. The
// reference keeps the *rounded values* as f32, so its results carry the same
// activation rounding as llama.cpp's.
#pragma once
#include <cstdint>
#include <string_view>

#include "backends/cpu/kernels/isa.h"
#include "core/dtype.h"

namespace opal::cpu {

struct GemmArgs {
  const uint8_t* w = nullptr;  // weight rows
  uint64_t w_row_bytes = 0;    // bytes between consecutive weight rows
  int64_t k = 0;               // elements per row
  int64_t row_begin = 0;       // the slice of weight rows (output columns) to compute
  int64_t row_end = 0;
  const uint8_t* act = nullptr;  // n_act converted activation rows
  uint64_t act_row_bytes = 0;
  int64_t n_act = 0;
  float* out = nullptr;      // out[a * out_stride + row]
  int64_t out_stride = 0;    // in floats
  float* scratch = nullptr;  // at least scratch_floats(k) floats, private to the thread
  // Every activation row is a separate dot product in llama.cpp (MUL_MAT_ID,
  // which never takes tinyBLAS): the kernels then use the one-row (ggml_vec_dot)
  // summation order even for n_act >= 2.
  bool single_rows = false;
  // The weight's layout (Tensor::layout, kernels/repack.h) and its total rows:
  // under a row-group layout, rows from the last whole group on are plain.
  uint8_t layout = 0;
  int64_t n_rows = 0;
};

struct MatmulKernels {
  DType weight_type = DType::F32;
  DType act_type = DType::F32;  // llama.cpp's vec_dot type for this weight type
  const char* name = "ref";
  uint64_t (*act_row_bytes)(int64_t k) = nullptr;
  // Converts one row of k f32 activations into the packed format at dst.
  void (*convert_act)(DType act_type, const float* x, uint8_t* dst, int64_t k) = nullptr;
  void (*gemm)(const GemmArgs& args) = nullptr;
  int64_t (*scratch_floats)(int64_t k) = nullptr;
  // Load-time repacking (kernels/repack.h): the layout this entry's decode
  // streams best (0: none), and gemm_packed, which reads weights in that
  // layout for batches of up to packed_max_act activation rows (row_begin a
  // multiple of the layout's group rows). Larger batches of a repacked weight
  // are unpacked a slice at a time for gemm (ops/matmul.cpp).
  uint8_t packed_layout = 0;
  int64_t packed_max_act = 0;
  void (*gemm_packed)(const GemmArgs& args) = nullptr;
  // Larger batches on that layout read in place (row_begin a multiple of the
  // group rows); returns false, writing nothing, for a batch it leaves to the
  // unpacked path (an order it does not run). Null: always unpacked.
  bool (*gemm_packed_batch)(const GemmArgs& args) = nullptr;
  // Mid-size batches (stop 17): gemm_packed also takes batches of up to
  // packed_mid_act rows where its order is the batch path's (packed_reads):
  // the prompt tiles' fixed cost per weight row, amortized over a few rows,
  // made a 17-row batch cost more than a 16-row one.
  int64_t packed_mid_act = 0;
};

// Whether the entry's gemm_packed runs a batch of n_act activation rows on its
// layout: up to packed_max_act always; up to packed_mid_act where the group
// kernels keep the bits the batch path would give (Q4_0 block-exact in every
// order; Q8_0 and Q5_0 in llama.cpp's order, not in the lanes order).
bool packed_reads(const MatmulKernels& k, int64_t n_act);

// The kernels for a weight type under the selected ISA (selected_isa()),
// falling back per type to the best lower ISA that has one, scalar last; null
// when even the reference has none.
const MatmulKernels* matmul_kernels(DType weight_type);
// The same for a given ISA (tests, benchmarks); the ISA must be host_supports().
const MatmulKernels* matmul_kernels(DType weight_type, Isa isa);
// Only the ISA's own entry (no fallback), or null.
const MatmulKernels* isa_matmul_kernels(DType weight_type, Isa isa);
// The summation order of quantized prompt batches whose fast kernel leaves
// llama.cpp's order (Q8_0 and Q5_0 batches of more than 16 activation rows),
// one process-wide switch:
//   llama: llama.cpp's (each block's 8 int32 lanes converted and accumulated
//          per (weight row, activation row) pair, reduced at the end): the
//          Q8_0 / Q5_0 goldens stay bit-identical with llama.cpp;
//   lanes: weight rows in the lanes, each block's exact int32 sum then one
//          FMA, as llama.cpp does for repacked Q4_0 (Q8_0: avx512, avx2-vnni,
//          avx2; Q5_0: avx2, which avx2-vnni uses too; the same bits on each):
//          about 2x the Q8_0 prompt speed with VNNI; logits close to
//          llama.cpp's (max|d|/std < 0.08) but two q8_0 goldens fork in greedy
//          decoding;
//   by_type (the default, named "auto"): lanes for Q5_0 (its goldens stay
//          within the 2-6-bit tolerance, greedy identical, and Q4_K_M files
//          whose rows are not a multiple of 256 are mostly Q5_0: SmolLM2's
//          AVX2 prompts 2-3x) and Q4_K, llama for Q8_0 (bit-identical goldens).
// On avx2 / avx2-vnni (stop 25) and avx512 (stop 40) Q5_0's lanes order is its
// order at every batch size, decode included (x86_avx2 q5_0_block_exact; one
// convert and FMA a block and row instead of eight); so is Q4_K's (stop 26: x86_avx2
// q4_K_super_block_exact; its batches of 4 rows or more take the lanes order
// under every choice, as before). Q6_K keeps llama.cpp's vec_dot order at decode.
// Initially $OPAL_BATCH_ORDER ("auto", "llama" or "lanes") if set, else
// $OPAL_Q8_0_ORDER (the older name), else auto; the tools' --batch-order
// (alias --q8-0-order) sets it (tools/isa_option.cpp).
// Otherwise decode, small batches and expert rows (single_rows) always take llama's.
enum class BatchOrder { by_type, llama, lanes };
BatchOrder batch_order();
void set_batch_order(BatchOrder order);
// Whether batches of weight_type take the lanes order under the selection.
bool lanes_order(DType weight_type);
// Parses "auto" / "llama" / "lanes"; throws opal::Error naming the choices.
BatchOrder parse_batch_order(std::string_view name);

// The row groups' software prefetch at decode (calls of 1-3 activation rows: a
// token, a short draft), on every x86 ISA: each group call requests the
// weights ahead of the one it reads, avx2 / avx2-vnni 16 KiB (Q8_0, Q4_0,
// Q5_0; their batches of 4 rows or more always take it), avx512 8 KiB (Q8_0,
// Q4_0, Q5_0; its batches never take it), and 8 KiB for the Q4_K / Q6_K
// groups of both. Whether it pays depends on the core's own prefetchers,
// not on the ISA the kernels use (token by token in one process, ratios
// without / with):
//   by_host (the default, named "auto"): off on AMD's AVX-512 cores (Zen 4,
//          Zen 5: the avx2 kernels under --isa avx2 decoded faster without it,
//          stops 27, 37, 40 and 41, and the avx512 groups, stops 37 and 40;
//          docs/cpu-decode.md "The decode prefetch"), on everywhere else: a
//          Zen 3 EPYC with AVX2 only (stop 42: one thread 1.15-1.56x, two
//          threads 1.05-1.37x) and an Intel Xeon with AVX-512 (stop 43: the
//          avx512 kernels 1.18-1.33x at one thread, 1.01-1.31x at two; the avx2
//          kernels under --isa avx2 1.19-1.59x / 1.12-1.39x);
//          decode_prefetch_by_host;
//   on / off: forced.
// The flash attention's decode over an f16 cache follows it too (software
// prefetch of the next tile and kv heads grouped when on; the hardware's
// stride prefetcher when off: ops/attention_flash.cpp), and so do the -fa 0
// decode's AVX-512 helpers (attn_kernels(): with it on, K read in one walk
// over whole rows and V for a kv head's heads together, kAttnKernelsPrefetch).
// It changes no result. Initially $OPAL_DECODE_PREFETCH ("auto", "on" or
// "off") if set, else auto; the tools' --decode-prefetch sets it
// (tools/isa_option.cpp).
enum class DecodePrefetch { by_host, on, off };
DecodePrefetch decode_prefetch_choice();
void set_decode_prefetch(DecodePrefetch choice);
// Parses "auto" / "on" / "off"; throws opal::Error naming the choices.
DecodePrefetch parse_decode_prefetch(std::string_view name);
// The auto rule for a host: off for an AMD CPU with AVX-512, on otherwise.
bool decode_prefetch_by_host(bool amd, bool avx512);
// Whether the decode prefetches under the choice on this host.
bool decode_prefetch();

// llama.cpp's vec_dot type of a weight type (F32 if none applies).
DType activation_type_for(DType weight_type);
// Rounds x through act_type (quantize then dequantize) into out; used by the
// reference kernels and by backends that must match them.
void round_activations(DType act_type, const float* x, float* out, int64_t k);
// The reference kernels' dot product of a dequantized weight row w and an
// activation row x already rounded by round_activations, in the same order as
// the reference gemm (batched: part of a MUL_MAT with >= 2 activation rows);
// for backends that must match the CPU reference bit for bit.
float reference_dot(DType weight_type, const float* w, const float* x, int64_t k, bool batched);

}  // namespace opal::cpu
