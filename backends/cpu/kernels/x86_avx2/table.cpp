// The AVX2 table entries. Quantized types use packed Q8_0 / Q8_K activation
// rows (the bytes of core/quant/activation.h); float types use f32 rows
// rounded through the weight type, as the reference does.
#include "backends/cpu/kernels/kernel_tables.h"
#include "backends/cpu/kernels/repack.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"

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

// Q4_0, Q5_0, Q8_0 (lanes order), Q4_K and Q6_K batches repack a slice of weight rows into per-thread scratch
// (q4_0_avx2.cpp, legacy_avx2.cpp, kquants_avx2.cpp); Q4_0's and Q5_0's activation rows carry block scales and sums
// after the blocks.
constexpr MatmulKernels with_scratch(MatmulKernels k, int64_t (*scratch_floats)(int64_t)) {
  k.scratch_floats = scratch_floats;
  return k;
}

// Q8_0, Q4_0 and Q5_0 decode from row groups of 8 repacked at load (kernels/repack.h): batches of up to
// max_act activation rows (Q8_0 / Q4_0: the plain kernels' decode-path sizes; Q5_0: 16, every batch in
// llama.cpp's order) read the groups.
constexpr MatmulKernels with_row_groups(MatmulKernels k, int64_t max_act, void (*gemm_packed)(const GemmArgs&)) {
  k.packed_layout = k.weight_type == DType::Q5_0 ? kLayoutQ5Groups8 : kLayoutRowGroups8;
  k.packed_max_act = max_act;
  k.gemm_packed = gemm_packed;
  return k;
}

// Q4_K and Q6_K decode from K-quant row groups of 8 repacked at load (kernels/repack.h, kquant_groups_avx2.cpp):
// batches of up to 3 activation rows (the plain kernels' per-row sizes) in their order; 4 or more read the
// groups in place too, in the plain lanes batches' order (gemm_packed_batch, stop 17).
// Q4_K takes the re-paired layout (kLayoutKGroups8Pairs, stop 24: a vpmaddwd per sub-block pair, not per
// sub-block), Q6_K its own (kLayoutQ6KGroups8Pairs, stop 27: a vpmaddwd per chunk pair, not per chunk).
constexpr MatmulKernels with_k_groups(MatmulKernels k, void (*gemm_packed)(const GemmArgs&),
                                      bool (*gemm_packed_batch)(const GemmArgs&)) {
  k.packed_layout = k.weight_type == DType::Q4_K ? kLayoutKGroups8Pairs : kLayoutQ6KGroups8Pairs;
  k.packed_max_act = 3;
  k.gemm_packed = gemm_packed;
  k.gemm_packed_batch = gemm_packed_batch;
  return k;
}

// Mid-size batches (stop 17): Q4_0 batches of up to mid_act rows on the row groups too (the group kernel meets 4
// activation rows at a time), the crossover with the rows-in-lanes batches from the per-row cost curve
// (bench_matmul_kernels mid*, docs/PERF.md "Stop 17, mb"): avx2 24, avx2-vnni 20.
constexpr MatmulKernels with_mid(MatmulKernels k, int64_t mid_act) {
  k.packed_mid_act = mid_act;
  return k;
}

// Prompt batches on the row groups read in place (q8_0_llama_tiles.h, q4_0_avx2.cpp), not unpacked.
constexpr MatmulKernels with_packed_batch(MatmulKernels k, bool (*gemm_packed_batch)(const GemmArgs&)) {
  k.gemm_packed_batch = gemm_packed_batch;
  return k;
}

constexpr MatmulKernels kTable[] = {
    with_mid(with_packed_batch(
                 with_row_groups(with_scratch(entry(DType::Q4_0, DType::Q8_0, "avx2", avx2::q8_0_sums_row_bytes,
                                                    avx2::convert_q8_0_sums, avx2::gemm_q4_0),
                                              avx2::q4_0_scratch_floats),
                                 8, avx2::gemm_q4_0_groups),
                 avx2::gemm_q4_0_packed_batch),
             24),
    with_packed_batch(with_row_groups(with_scratch(entry(DType::Q5_0, DType::Q8_0, "avx2", avx2::q8_0_sums_row_bytes,
                                                         avx2::convert_q8_0_sums, avx2::gemm_q5_0),
                                                   avx2::q5_0_scratch_floats),
                                      16, avx2::gemm_q5_0_groups),
                      avx2::gemm_q5_0_packed_batch),
    with_packed_batch(with_row_groups(with_scratch(entry(DType::Q8_0, DType::Q8_0, "avx2", avx2::q8_0_sums_row_bytes,
                                                         avx2::convert_q8_0_sums, avx2::gemm_q8_0),
                                                   avx2::q8_0_scratch_floats),
                                      16, avx2::gemm_q8_0_groups),
                      avx2::gemm_q8_0_packed_batch),
    with_k_groups(
        with_scratch(entry(DType::Q4_K, DType::Q8_K, "avx2", q8_K_row_bytes, avx2::convert_q8_K, avx2::gemm_q4_K),
                     avx2::q4_K_scratch_floats),
        avx2::gemm_q4_K_groups, avx2::gemm_q4_K_groups_batch),
    entry(DType::Q5_K, DType::Q8_K, "avx2", q8_K_row_bytes, avx2::convert_q8_K, avx2::gemm_q5_K),
    with_k_groups(
        with_scratch(entry(DType::Q6_K, DType::Q8_K, "avx2", q8_K_row_bytes, avx2::convert_q8_K, avx2::gemm_q6_K),
                     avx2::q6_K_scratch_floats),
        avx2::gemm_q6_K_groups, avx2::gemm_q6_K_groups_batch),
    entry(DType::F32, DType::F32, "avx2", f32_row_bytes, round_act, avx2::gemm_f32),
    entry(DType::F16, DType::F16, "avx2", f32_row_bytes, round_act, avx2::gemm_f16),
    entry(DType::BF16, DType::BF16, "avx2", f32_row_bytes, round_act, avx2::gemm_bf16),
};

// avx2-vnni: its own Q4_0, Q5_0, Q8_0, Q4_K and Q6_K entries (the other types fall back to avx2).
constexpr MatmulKernels kVnniTable[] = {
    with_mid(with_packed_batch(
                 with_row_groups(with_scratch(entry(DType::Q4_0, DType::Q8_0, "avx2-vnni", avx2::q8_0_sums_row_bytes,
                                                    avx2::convert_q8_0_sums, avx2vnni::gemm_q4_0),
                                              avx2vnni::scratch_floats),
                                 8, avx2::gemm_q4_0_groups_vnni),
                 avx2vnni::gemm_q4_0_packed_batch),
             20),
    with_packed_batch(
        with_row_groups(with_scratch(entry(DType::Q5_0, DType::Q8_0, "avx2-vnni", avx2::q8_0_sums_row_bytes,
                                           avx2::convert_q8_0_sums, avx2vnni::gemm_q5_0),
                                     avx2::q5_0_scratch_floats),
                        16, avx2vnni::gemm_q5_0_groups),
        avx2vnni::gemm_q5_0_packed_batch),
    with_packed_batch(
        with_row_groups(with_scratch(entry(DType::Q8_0, DType::Q8_0, "avx2-vnni", avx2vnni::q8_0_flipped_row_bytes,
                                           avx2vnni::convert_q8_0_flipped, avx2vnni::gemm_q8_0),
                                     avx2vnni::scratch_floats),
                        16, avx2::gemm_q8_0_groups_vnni),
        avx2vnni::gemm_q8_0_packed_batch),
    with_k_groups(with_scratch(entry(DType::Q4_K, DType::Q8_K, "avx2-vnni", q8_K_row_bytes, avx2::convert_q8_K,
                                     avx2vnni::gemm_q4_K),
                               avx2vnni::q4_K_scratch_floats),
                  avx2vnni::gemm_q4_K_groups, avx2vnni::gemm_q4_K_groups_batch),
    with_k_groups(with_scratch(entry(DType::Q6_K, DType::Q8_K, "avx2-vnni", q8_K_row_bytes, avx2::convert_q8_K,
                                     avx2vnni::gemm_q6_K),
                               avx2vnni::q6_K_scratch_floats),
                  avx2vnni::gemm_q6_K_groups, avx2vnni::gemm_q6_K_groups_batch),
};

}  // namespace

const MatmulKernels* avx2_matmul_kernels(DType weight_type) {
  for (const auto& k : kTable)
    if (k.weight_type == weight_type) return &k;
  return nullptr;
}

const MatmulKernels* avx2vnni_matmul_kernels(DType weight_type) {
  for (const auto& k : kVnniTable)
    if (k.weight_type == weight_type) return &k;
  return nullptr;
}

}  // namespace opal::cpu
#else
namespace opal::cpu {
const MatmulKernels* avx2_matmul_kernels(DType) { return nullptr; }
const MatmulKernels* avx2vnni_matmul_kernels(DType) { return nullptr; }
}  // namespace opal::cpu
#endif  // x86
