/* norm.c - RMS_NORM (F32): y = x * rsqrt(mean(x^2) + eps) per row of ne[0].
 *
 * Sum of squares in 8 fp32 lanes (fmadd.ps), lanes summed pairwise; mean = sum / n and the
 * reciprocal square root from et_math.h (no fdiv/fsqrt); the scaling 8 lanes at a time. The CPU
 * sums the squares in double: the results differ by the fp32 accumulation error of the sum
 * (relative ~ n/8 * 2^-24 worst case) plus 2 ulp of rsqrt.
 * SPMD: rows over the harts in groups that start on 64-byte lines; rows contiguous (nb[0] = 4),
 * ne[0] % 8 == 0 (else ET_STATUS_BAD_SHAPE).
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

static int64_t row_grain(int64_t ne0) {
  int64_t r = ne0 % 16, g = 1;
  if (r == 0) return 1;
  while ((g * r) % 16 != 0) ++g;
  return g;
}

static float sum_squares(const float* x, int64_t n) {
  float r;
  int64_t k = n / 8, t;
  __asm__ volatile(
      ETI_FBCX(ft0, z) "1:\n\t" ETI_FLW(ft1, 0, x)
          ETI_FMADD(ft0, ft1, ft1, ft0) "addi %[x], %[x], 32\n\taddi %[k], %[k], -1\n\tbnez %[k], 1b\n\t" ETI_HSUM8(
              ft2, ft0, ft1, t) "fmv.s %[r], ft2\n\t"
      : [x] "+r"(x), [k] "+r"(k), [r] "=f"(r), [t] "=&r"(t)
      : [z] "r"(0)
      : "ft0", "ft1", "ft2", "memory");
  return r;
}

static void scale_row(float* y, const float* x, float s, int64_t n) {
  int64_t k = n / 8;
  __asm__ volatile(
      ETI_FBC(ft1, 0, s) "1:\n\t" ETI_FLW(ft0, 0, x) ETI_FMUL(ft0, ft0, ft1)
          ETI_FSW(ft0, 0, y) "addi %[x], %[x], 32\n\taddi %[y], %[y], 32\n\taddi %[k], %[k], -1\n\tbnez %[k], 1b\n\t"
      : [x] "+r"(x), [y] "+r"(y), [k] "+r"(k)
      : [s] "r"(&s)
      : "ft0", "ft1", "memory");
}

static int64_t rms_norm_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtRmsNormArgs* p = (const EtRmsNormArgs*)args;
  const EtTensor *a = &p->src, *d = &p->dst;
  if (a->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  const int64_t n = a->ne[0], ne1 = a->ne[1], ne2 = a->ne[2];
  for (int i = 0; i < 4; ++i)
    if (d->ne[i] != a->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (n % 8 != 0 || a->nb[0] != 4 || d->nb[0] != 4) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if ((a->addr | d->addr | a->nb[1] | d->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 0);
  const float inv_n = et_recipf((float)(int32_t)n);
  int64_t r0, r1;
  et_split(et_spmd(&p->h), ne1 * ne2 * a->ne[3], row_grain(n), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    const float* x = (const float*)(uintptr_t)(a->addr + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3]);
    float* y = (float*)(uintptr_t)(d->addr + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
    const float mean = sum_squares(x, n) * inv_n;
    scale_row(y, x, et_rsqrtf(mean + p->eps), n);
  }
  return ET_STATUS_OK;
}
ET_KERNEL(ET_K_RMS_NORM_F32, rms_norm_f32);
