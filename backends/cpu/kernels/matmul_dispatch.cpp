// matmul_kernels(): the selected ISA's entry for a weight type, falling back
// per type to the next lower ISA (avx512 -> avx2 -> scalar, neon -> scalar).
#include "backends/cpu/kernels/kernel_tables.h"

namespace opal::cpu {

const MatmulKernels* isa_matmul_kernels(DType weight_type, Isa isa) {
  switch (isa) {
    case Isa::scalar: return ref_matmul_kernels(weight_type);
    case Isa::avx2: return avx2_matmul_kernels(weight_type);
    case Isa::avx512: return avx512_matmul_kernels(weight_type);
    case Isa::neon: return neon_matmul_kernels(weight_type);
  }
  return nullptr;
}

const MatmulKernels* matmul_kernels(DType weight_type, Isa isa) {
  const MatmulKernels* ref = ref_matmul_kernels(weight_type);
  if (!ref) return nullptr;  // no reference dequantizer: no kernel at all
  for (Isa i = isa;; i = (i == Isa::avx512 ? Isa::avx2 : Isa::scalar)) {
    if (const MatmulKernels* k = isa_matmul_kernels(weight_type, i)) return k;
    if (i == Isa::scalar) return nullptr;
  }
}

const MatmulKernels* matmul_kernels(DType weight_type) { return matmul_kernels(weight_type, selected_isa()); }

}  // namespace opal::cpu
