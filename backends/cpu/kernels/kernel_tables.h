// Per-ISA kernel tables behind matmul_kernels() (matmul_dispatch.cpp). Each
// returns its ISA's entry for a weight type, or null when it has none (or when
// this build's architecture cannot have that ISA).
#pragma once
#include "backends/cpu/kernels/matmul_kernels.h"

namespace opal::cpu {

const MatmulKernels* ref_matmul_kernels(DType weight_type);
const MatmulKernels* avx2_matmul_kernels(DType weight_type);
const MatmulKernels* avx2vnni_matmul_kernels(DType weight_type);  // Q4_0 and Q8_0 only
const MatmulKernels* avx512_matmul_kernels(DType weight_type);
const MatmulKernels* neon_matmul_kernels(DType weight_type);

// round_activations() in portable scalar code (ref/matmul_ref.cpp); the
// dispatcher uses an ISA's hardware f16 rounding (the same values) instead
// where the selected ISA has one.
void ref_round_activations(DType act_type, const float* x, float* out, int64_t k);

}  // namespace opal::cpu
