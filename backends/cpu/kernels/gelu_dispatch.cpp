// The GELU/GEGLU kernels of the selected ISA (kernels/gelu_kernels.h): avx512,
// avx2, or none (the scalar form in ops/elementwise.cpp).
#include "backends/cpu/kernels/gelu_kernels.h"
#include "backends/cpu/kernels/isa.h"

namespace opal::cpu {

const GeluKernels* gelu_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512: return &avx512::kGeluKernels;
    case Isa::avx2: return &avx2::kGeluKernels;
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

}  // namespace opal::cpu
