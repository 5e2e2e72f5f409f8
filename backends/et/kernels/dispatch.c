/* dispatch.c - kernel selection inside an image: the header's kernel_id is looked up in the
 * entry table that the linker collects from every kernel source (section .et_kernel_table,
 * see et_runtime.h ET_KERNEL), so any set of kernel families links into one image. */
#include "backends/et/kernels/et_runtime.h"

extern const EtKernelEntry __et_kernel_table_start[];
extern const EtKernelEntry __et_kernel_table_end[];

int64_t et_dispatch(const void* args, const EtEnv* env) {
  const EtArgsHeader* h = (const EtArgsHeader*)args;
  if (h->abi_version != ET_ABI_VERSION) return et_fail(ET_STATUS_BAD_ABI, h->abi_version);
  for (const EtKernelEntry* e = __et_kernel_table_start; e < __et_kernel_table_end; ++e)
    if (e->kernel_id == h->kernel_id) return ((EtKernelFn)(uintptr_t)e->fn)(args, env);
  return et_fail(ET_STATUS_NO_KERNEL, h->kernel_id);
}
