/* dispatch.c - kernel selection inside an image: the header's kernel_id is looked up in the
 * entry table that the linker collects from every kernel source (section .et_kernel_table,
 * see et_runtime.h ET_KERNEL), so any set of kernel families links into one image. With
 * ET_ARGS_SCP_ON_ENTRY (a card's tensor-unit launch) each even hart turns its minion's L1
 * scratchpad on around the kernel (ucache_control bit 1: the write zeroes the scratchpad; the
 * firmware has set split mode, bit 0) and off after it. */
#include "backends/et/kernels/et_runtime.h"

extern const EtKernelEntry __et_kernel_table_start[];
extern const EtKernelEntry __et_kernel_table_end[];

int64_t et_dispatch(const void* args, const EtEnv* env) {
  const EtArgsHeader* h = (const EtArgsHeader*)args;
  if (h->abi_version != ET_ABI_VERSION) return et_fail(ET_STATUS_BAD_ABI, h->abi_version);
  for (const EtKernelEntry* e = __et_kernel_table_start; e < __et_kernel_table_end; ++e) {
    if (e->kernel_id != h->kernel_id) continue;
    const int scp = (h->flags & ET_ARGS_SCP_ON_ENTRY) && et_hart_id() % 2 == 0;
    if (scp) __asm__ volatile("csrsi 0x810, 2\n\tfence" ::: "memory");
    const int64_t r = ((EtKernelFn)(uintptr_t)e->fn)(args, env);
    if (scp) __asm__ volatile("fence\n\tcsrci 0x810, 2" ::: "memory");
    return r;
  }
  return et_fail(ET_STATUS_NO_KERNEL, h->kernel_id);
}
