// The RWKV-7 kernels of the selected ISA (kernels/rwkv_kernels.h): avx512,
// avx2, or none (the scalar forms in ops/rwkv.cpp).
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/rwkv_kernels.h"

namespace opal::cpu {

const RwkvKernels* rwkv_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512: return &avx512::kRwkvKernels;
    case Isa::avx2:
    case Isa::avx2_vnni: return &avx2::kRwkvKernels;
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

}  // namespace opal::cpu
