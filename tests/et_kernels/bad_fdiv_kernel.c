/* bad_fdiv_kernel.c - a deliberately bad ET kernel for the negative test of
 * scripts/check_et_kernels.py: it divides with fdiv.s, which ET-SoC-1 does not implement
 * (emitted explicitly: the kernels are compiled with -mno-fdiv). */
#include "backends/et/kernels/et_runtime.h"

static int64_t bad_divide(const void* args, const EtEnv* env) {
  (void)env;
  const EtTestMathArgs* p = (const EtTestMathArgs*)args;
  float a = (float)p->fn, b = (float)p->packed, q;
  __asm__ volatile("fdiv.s %0, %1, %2" : "=f"(q) : "f"(a), "f"(b));
  return q > 1.0f;
}
ET_KERNEL(ET_K_TEST_MATH, bad_divide);
