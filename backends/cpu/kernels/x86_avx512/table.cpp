// The AVX-512 table entries. Quantized types use packed Q8_0 / Q8_K activation
// rows (the bytes of core/quant/activation.h); float types use f32 rows
// rounded through the weight type, as the reference does.
#include "backends/cpu/kernels/kernel_tables.h"
#include "backends/cpu/kernels/repack.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu {
namespace {

uint64_t q8_K_row_bytes(int64_t k) { return uint64_t(k / 256) * 292; }
uint64_t f32_row_bytes(int64_t k) { return uint64_t(k) * 4; }
int64_t none(int64_t) { return 0; }
void round_act(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  round_activations(act_type, x, reinterpret_cast<float*>(dst), k);
}

constexpr MatmulKernels entry(DType w, DType act, const char* name, uint64_t (*row_bytes)(int64_t),
                              void (*convert)(DType, const float*, uint8_t*, int64_t), void (*gemm)(const GemmArgs&)) {
  MatmulKernels k;
  k.weight_type = w;
  k.act_type = act;
  k.name = name;
  k.act_row_bytes = row_bytes;
  k.convert_act = convert;
  k.gemm = gemm;
  k.scratch_floats = none;
  return k;
}

// Q4_0, Q4_K and Q6_K batches (and Q5_0 / Q8_0 ones in the lanes order)
// repack a slice of weight rows into per-thread scratch (legacy_avx512.cpp,
// kquants_avx512.cpp); Q4_0's, Q5_0's and Q8_0's activation rows carry block
// scales and sums after the blocks.
constexpr MatmulKernels with_scratch(MatmulKernels k, int64_t (*scratch_floats)(int64_t)) {
  k.scratch_floats = scratch_floats;
  return k;
}

// Q4_K and Q6_K decode from K-quant row groups of 8 repacked at load (kernels/repack.h,
// kquant_groups_avx512.cpp): batches of up to 4 activation rows (the plain kernels' per-row sizes) in their
// order; 5 to 127 read the groups in place too, in the plain lanes batches' order (gemm_packed_batch, stop 17), and
// larger ones are unpacked for the plain entry (stop 33: its RowsInLanes is faster there; the same order).
// The groups hold lanes 2u and 2u + 1 side by side (kLayoutQ4KGroups8Wide, kLayoutQ6KGroups8Wide, stop 39: no
// activation shuffle).
constexpr MatmulKernels with_k_groups(MatmulKernels k, void (*gemm_packed)(const GemmArgs&),
                                      bool (*gemm_packed_batch)(const GemmArgs&)) {
  k.packed_layout = k.weight_type == DType::Q4_K ? kLayoutQ4KGroups8Wide : kLayoutQ6KGroups8Wide;
  k.packed_max_act = 4;
  k.gemm_packed = gemm_packed;
  k.gemm_packed_batch = gemm_packed_batch;
  return k;
}

// Q8_0, Q4_0 and Q5_0 decode and batches of up to 16 rows (Q8_0: 8, Q4_0: 11; the plain kernels' decode-path sizes)
// from row groups of 8 repacked at load (kernels/repack.h, row_groups_avx512.cpp). Larger batches read the groups in
// place too where gemm_packed_batch is given (Q4_0, Q8_0 in llama.cpp's order; stop 33), else MUL_MAT unpacks them 32
// rows at a time.
constexpr MatmulKernels with_row_groups(MatmulKernels k, void (*gemm_packed)(const GemmArgs&),
                                        bool (*gemm_packed_batch)(const GemmArgs&) = nullptr, int64_t max_act = 16) {
  k.packed_layout = k.weight_type == DType::Q5_0 ? kLayoutQ5Groups8 : kLayoutRowGroups8;
  k.packed_max_act = max_act;
  k.gemm_packed = gemm_packed;
  k.gemm_packed_batch = gemm_packed_batch;
  return k;
}

// Mid-size batches (stop 17): up to mid_act rows on the row groups too (packed_reads: where the order allows),
// the crossover with the batch path from the per-row cost curve (bench_matmul_kernels mid*, docs/PERF.md "Stop 17,
// mb"): Q5_0 (llama.cpp's order only) 40; Q4_0 none since stop 35 (it was 64: RowsInLanes, its repack reading
// whole groups, is ahead of the groups from 17 rows), Q8_0 none since stop 35 (it was 128: the rows-in-lanes prompt
// kernel, Q8_0LlamaLanes, is ahead of the groups from 9 rows; mid-batch* against mid-groups*).
constexpr MatmulKernels with_mid(MatmulKernels k, int64_t mid_act) {
  k.packed_mid_act = mid_act;
  return k;
}

constexpr MatmulKernels kTable[] = {
    with_row_groups(with_scratch(entry(DType::Q4_0, DType::Q8_0, "avx512-vnni", avx512::q8_0_sums_row_bytes,
                                       avx512::convert_q8_0_sums, avx512::gemm_q4_0),
                                 avx512::legacy_scratch_floats),
                    avx512::gemm_q4_0_groups, avx512::gemm_q4_0_packed_batch, 11),
    with_mid(with_row_groups(with_scratch(entry(DType::Q5_0, DType::Q8_0, "avx512-vnni", avx512::q8_0_sums_row_bytes,
                                                avx512::convert_q8_0_sums, avx512::gemm_q5_0),
                                          avx512::legacy_scratch_floats),
                             avx512::gemm_q5_0_groups, avx512::gemm_q5_0_packed_batch),
             40),
    with_row_groups(with_scratch(entry(DType::Q8_0, DType::Q8_0, "avx512-vnni", avx512::q8_0_flipped_row_bytes,
                                       avx512::convert_q8_0_flipped, avx512::gemm_q8_0),
                                 avx512::legacy_scratch_floats),
                    avx512::gemm_q8_0_groups, avx512::gemm_q8_0_packed_batch, 8),
    with_k_groups(with_scratch(entry(DType::Q4_K, DType::Q8_K, "avx512-vnni", q8_K_row_bytes, avx512::convert_q8_K,
                                     avx512::gemm_q4_K),
                               avx512::q4_K_scratch_floats),
                  avx512::gemm_q4_K_groups, avx512::gemm_q4_K_groups_batch),
    entry(DType::Q5_K, DType::Q8_K, "avx512-vnni", q8_K_row_bytes, avx512::convert_q8_K, avx512::gemm_q5_K),
    with_k_groups(with_scratch(entry(DType::Q6_K, DType::Q8_K, "avx512-vnni", q8_K_row_bytes, avx512::convert_q8_K,
                                     avx512::gemm_q6_K),
                               avx512::q6_K_scratch_floats),
                  avx512::gemm_q6_K_groups, avx512::gemm_q6_K_groups_batch),
    entry(DType::F32, DType::F32, "avx512", f32_row_bytes, round_act, avx512::gemm_f32),
    entry(DType::F16, DType::F16, "avx512", f32_row_bytes, round_act, avx512::gemm_f16),
    entry(DType::BF16, DType::BF16, "avx512", f32_row_bytes, round_act, avx512::gemm_bf16),
};

}  // namespace

const MatmulKernels* avx512_matmul_kernels(DType weight_type) {
  for (const auto& k : kTable)
    if (k.weight_type == weight_type) return &k;
  return nullptr;
}

}  // namespace opal::cpu
#else
namespace opal::cpu {
const MatmulKernels* avx512_matmul_kernels(DType) { return nullptr; }
}  // namespace opal::cpu
#endif  // x86
