// The NEON table entries (aarch64 builds only; elsewhere no entries).
#include "backends/cpu/kernels/kernel_tables.h"

#if defined(__aarch64__)
#include "backends/cpu/kernels/arm_neon/kernels_neon.h"

namespace opal::cpu {
namespace {

uint64_t q8_0_row_bytes(int64_t k) { return uint64_t(k / 32) * 34; }
uint64_t q8_K_row_bytes(int64_t k) { return uint64_t(k / 256) * 292; }
int64_t none(int64_t) { return 0; }

constexpr MatmulKernels entry(DType w, DType act, uint64_t (*row_bytes)(int64_t),
                              void (*convert)(DType, const float*, uint8_t*, int64_t), void (*gemm)(const GemmArgs&)) {
  MatmulKernels k;
  k.weight_type = w;
  k.act_type = act;
  k.name = "neon-dotprod";
  k.act_row_bytes = row_bytes;
  k.convert_act = convert;
  k.gemm = gemm;
  k.scratch_floats = none;
  return k;
}

// Q4_0, Q5_0 and Q8_0 batches in the lanes repack a slice of weight rows into per-thread scratch (quants_neon.cpp).
constexpr MatmulKernels with_scratch(MatmulKernels k, int64_t (*scratch_floats)(int64_t)) {
  k.scratch_floats = scratch_floats;
  return k;
}

constexpr MatmulKernels kTable[] = {
    with_scratch(entry(DType::Q4_0, DType::Q8_0, q8_0_row_bytes, neon::convert_q8_0, neon::gemm_q4_0),
                 neon::legacy_scratch_floats),
    with_scratch(entry(DType::Q5_0, DType::Q8_0, q8_0_row_bytes, neon::convert_q8_0, neon::gemm_q5_0),
                 neon::legacy_scratch_floats),
    with_scratch(entry(DType::Q8_0, DType::Q8_0, q8_0_row_bytes, neon::convert_q8_0, neon::gemm_q8_0),
                 neon::legacy_scratch_floats),
    entry(DType::Q4_K, DType::Q8_K, q8_K_row_bytes, neon::convert_q8_K, neon::gemm_q4_K),
    entry(DType::Q6_K, DType::Q8_K, q8_K_row_bytes, neon::convert_q8_K, neon::gemm_q6_K),
};

}  // namespace

const MatmulKernels* neon_matmul_kernels(DType weight_type) {
  for (const auto& k : kTable)
    if (k.weight_type == weight_type) return &k;
  return nullptr;
}

}  // namespace opal::cpu
#else
namespace opal::cpu {
const MatmulKernels* neon_matmul_kernels(DType) { return nullptr; }
}  // namespace opal::cpu
#endif  // __aarch64__
