// The attention kernels of the selected ISA (attn_kernels.h, attn_flash.h).
#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"

namespace opal::cpu {

const AttnKernels* attn_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512: return decode_prefetch() ? &avx512::kAttnKernelsPrefetch : &avx512::kAttnKernels;
    case Isa::avx2:
    case Isa::avx2_vnni:  // the whole-row V walk not on AMD's cores (Zen 5 ran it 20-40 % slower, stop 32)
      return decode_prefetch() && !host_is_amd() ? &avx2::kAttnKernelsPrefetch : &avx2::kAttnKernels;
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

const FlashKernels& flash_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  switch (selected_isa()) {
    case Isa::avx512: return avx512::kFlashKernels;
    case Isa::avx2: return avx2::kFlashKernels;
    case Isa::avx2_vnni: {
      static const FlashKernels vnni = [] {
        FlashKernels k = avx2::kFlashKernels;
        k.name = "avx2-vnni";
        k.dots_q8_0_int = avx2vnni::flash_dots_q8_0_int;
        k.dots_q4_0_int = avx2vnni::flash_dots_q4_0_int;
        return k;
      }();
      return vnni;
    }
    default: return ref_flash_kernels();
  }
#else
  return ref_flash_kernels();
#endif
}

}  // namespace opal::cpu
