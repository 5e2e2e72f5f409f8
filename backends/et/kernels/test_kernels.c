/* test_kernels.c - test-only kernels (image "test"): TEST_FAULT makes one hart fail in a chosen
 * way so the host's error path can be checked end to end. */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

/* The hart of rank p->rank fails: mode 0 returns status/detail; mode 1 executes fence.i, which
 * ET-SoC-1 does not implement (mcause 30, like fdiv.s, but allowed by the build check); mode 2
 * loads from the M-mode-only first 8 MiB (access fault); mode 3 spins forever (inside a fused
 * launch: a hart that never arrives at the next barrier). The other harts succeed. */
static int64_t test_fault(const void* args, const EtEnv* env) {
  (void)env;
  const EtTestFaultArgs* p = (const EtTestFaultArgs*)args;
  EtSpmd s = et_spmd(&p->h);
  if (s.rank != p->rank) return ET_STATUS_OK;
  if (p->mode == 1) __asm__ volatile(".insn i 0x0F, 1, x0, x0, 0" ::: "memory"); /* fence.i */
  if (p->mode == 2) return (int64_t)(*(volatile uint64_t*)(uintptr_t)ET_LAUNCH_ADDR & 0);
  if (p->mode == 3)
    for (;;) __asm__ volatile("" ::: "memory"); /* never returns: a sub-op that never arrives */
  return et_fail(p->status, p->detail);
}
ET_KERNEL(ET_K_TEST_FAULT, test_fault);

/* TEST_MATH: dst[i] = fn(src[i]) with the et_math.h helper, scalar or 8-lane packed (exp,
 * reciprocal, silu), 16 elements (one line) per chunk split over the harts. */
static float scalar_fn(uint32_t fn, float x, float y) {
  float s, c;
  switch (fn) {
    case ET_MATH_RECIP: return et_recipf(x);
    case ET_MATH_RSQRT: return et_rsqrtf(x);
    case ET_MATH_EXP: return et_expf(x);
    case ET_MATH_SIGMOID: return et_sigmoidf(x);
    case ET_MATH_SILU: return et_siluf(x);
    case ET_MATH_SIN: et_sincosf(x, &s, &c); return s;
    case ET_MATH_COS: et_sincosf(x, &s, &c); return c;
    default: return et_divf(x, y);
  }
}

/* One row of n elements with function fn, scalar or packed. */
static void math_row(uint32_t fn, uint32_t packed, float* dst, const float* src, const float* src2, int64_t i0,
                     int64_t i1) {
  for (int64_t i = i0; i < i1; i += 8) {
    if (!packed) {
      for (int j = 0; j < 8; ++j) dst[i + j] = scalar_fn(fn, src[i + j], src2 ? src2[i + j] : 1.0f);
    } else if (fn == ET_MATH_EXP) {
      et_exp8(dst + i, src + i);
    } else if (fn == ET_MATH_RECIP) {
      et_recip8(dst + i, src + i);
    } else {
      et_silu8(dst + i, src + i, 0);
    }
  }
}

/* fn < ET_MATH_FN_COUNT: every row with that function. fn == ET_MATH_FN_COUNT: row r < 9 with
 * scalar function r, rows 9, 10, 11 with packed exp, reciprocal, silu (all cases, one launch). */
static int64_t test_math(const void* args, const EtEnv* env) {
  (void)env;
  const EtTestMathArgs* p = (const EtTestMathArgs*)args;
  if (p->fn > ET_MATH_FN_COUNT) return et_fail(ET_STATUS_BAD_SHAPE, p->fn);
  if (p->fn < ET_MATH_FN_COUNT && p->packed && p->fn != ET_MATH_EXP && p->fn != ET_MATH_RECIP && p->fn != ET_MATH_SILU)
    return et_fail(ET_STATUS_BAD_SHAPE, p->fn);
  const int64_t n = p->src.ne[0], rows = p->src.ne[1];
  if (n % 16 != 0) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  int64_t i0, i1;
  et_split(et_spmd(&p->h), n, 16, &i0, &i1);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t fn = p->fn, packed = p->packed;
    if (fn == ET_MATH_FN_COUNT) {
      static const uint32_t packed_fn[3] = {ET_MATH_EXP, ET_MATH_RECIP, ET_MATH_SILU};
      packed = r >= ET_MATH_FN_COUNT;
      fn = packed ? packed_fn[(r - ET_MATH_FN_COUNT) % 3] : (uint32_t)r;
    }
    const float* src = (const float*)(uintptr_t)(p->src.addr + (uint64_t)r * p->src.nb[1]);
    const float* src2 = p->src2.addr ? (const float*)(uintptr_t)(p->src2.addr + (uint64_t)r * p->src2.nb[1]) : 0;
    float* dst = (float*)(uintptr_t)(p->dst.addr + (uint64_t)r * p->dst.nb[1]);
    math_row(fn, packed, dst, src, src2, i0, i1);
  }
  return ET_STATUS_OK;
}
ET_KERNEL(ET_K_TEST_MATH, test_math);

/* TEST_TENSOR: one tensor-unit tile on hart 0 (see EtTestTensorArgs). */
static int64_t test_tensor(const void* args, const EtEnv* env) {
  (void)env;
  const EtTestTensorArgs* p = (const EtTestTensorArgs*)args;
  if (et_spmd(&p->h).rank != 0) return ET_STATUS_OK;
  if (p->arows < 1 || p->arows > 16) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  const uint64_t blines = p->type == 0 ? p->kvals / 4 : p->kvals / 2;
  if (blines < 1 || blines > 16) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  et_tensor_load(0, (const void*)(uintptr_t)p->a, p->arows, 64);
  et_tensor_load(16, (const void*)(uintptr_t)p->b, blines, 64);
  et_tensor_wait_load();
  const uint64_t c = p->type == 0 ? et_tensor_ima8_ctrl(p->arows, p->kvals, p->aoff, 0, 16)
                                  : et_tensor_fma16_ctrl(p->arows, p->kvals, p->aoff, 0, 16);
  et_tensor_fma_store(c, (void*)(uintptr_t)p->out);
  const uint64_t err = et_tensor_error();
  return err ? et_fail(ET_STATUS_TENSOR_ERROR, (uint32_t)err) : ET_STATUS_OK;
}
ET_KERNEL(ET_K_TEST_TENSOR, test_tensor);
