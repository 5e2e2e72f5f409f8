// The ARM NEON kernels (Armv8.2-A with the dot-product extension, e.g. the
// RK3588's Cortex-A76), one file per concern:
//   act_neon.cpp     activation quantization to Q8_0 / Q8_K (bytes equal to core/quant's)
//   quants_neon.cpp  Q4_0, Q5_0, Q8_0 x Q8_0 and Q4_K, Q6_K x Q8_K
//   table.cpp        the table entries (compiled without ISA flags)
// Other types fall back to the reference kernels on ARM. sdot multiplies
// signed by signed bytes, so unlike x86 no offset or sign tricks are needed.
// Only the *_neon.cpp files get -march=armv8.2-a+dotprod (CMakeLists.txt,
// cmake/kernels_only.cmake).
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/matmul_kernels.h"

namespace opal::cpu::neon {

void convert_q8_0(DType act_type, const float* x, uint8_t* dst, int64_t k);
void convert_q8_K(DType act_type, const float* x, uint8_t* dst, int64_t k);
void gemm_q4_0(const GemmArgs& g);
void gemm_q5_0(const GemmArgs& g);
void gemm_q8_0(const GemmArgs& g);
void gemm_q4_K(const GemmArgs& g);
void gemm_q6_K(const GemmArgs& g);
// Per-thread scratch of the Q4_0 / Q5_0 / Q8_0 batches in the lanes (a repacked slice of weight rows).
int64_t legacy_scratch_floats(int64_t k);

}  // namespace opal::cpu::neon
