#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"

namespace opal::cpu {

const AttnKernels* attn_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512: return &avx512::kAttnKernels;
    case Isa::avx2: return &avx2::kAttnKernels;
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

}  // namespace opal::cpu
