// The SILU/SWIGLU kernels of the selected ISA (kernels/silu_kernels.h): avx2's
// on every x86 ISA that has AVX2, or none (the scalar form in ops/elementwise.cpp).
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/silu_kernels.h"

namespace opal::cpu {

const SiluKernels* silu_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512:
    case Isa::avx2_vnni:
    case Isa::avx2: return &avx2::kSiluKernels;
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

}  // namespace opal::cpu
