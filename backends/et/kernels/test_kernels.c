/* test_kernels.c - test-only kernels (image "test"): TEST_FAULT makes one hart fail in a chosen
 * way so the host's error path can be checked end to end. */
#include "backends/et/kernels/et_runtime.h"

/* The hart of rank p->rank fails: mode 0 returns status/detail; mode 1 executes fence.i, which
 * ET-SoC-1 does not implement (mcause 30, like fdiv.s, but allowed by the build check); mode 2
 * loads from the M-mode-only first 8 MiB (access fault). The other harts succeed. */
static int64_t test_fault(const void* args, const EtEnv* env) {
  (void)env;
  const EtTestFaultArgs* p = (const EtTestFaultArgs*)args;
  EtSpmd s = et_spmd(&p->h);
  if (s.rank != p->rank) return ET_STATUS_OK;
  if (p->mode == 1) __asm__ volatile(".insn i 0x0F, 1, x0, x0, 0" ::: "memory"); /* fence.i */
  if (p->mode == 2) return (int64_t)(*(volatile uint64_t*)(uintptr_t)ET_LAUNCH_ADDR & 0);
  return et_fail(p->status, p->detail);
}
ET_KERNEL(ET_K_TEST_FAULT, test_fault);
