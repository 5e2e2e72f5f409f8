/* norm.c - RMS_NORM (F32): y = x * rsqrt(mean(x^2) + eps) per row of ne[0].
 *
 * Sum of squares in 8 fp32 lanes (fmadd.ps), lanes summed pairwise; mean = sum / n and the
 * reciprocal square root from et_math.h (no fdiv/fsqrt); the scaling 8 lanes at a time. The CPU
 * sums the squares in double: the results differ by the fp32 accumulation error of the sum
 * (relative ~ n/8 * 2^-24 worst case) plus 2 ulp of rsqrt.
 * SPMD: rows over the harts in groups that start on 64-byte lines; rows contiguous (nb[0] = 4),
 * ne[0] % 8 == 0 (else ET_STATUS_BAD_SHAPE).
 * Fewer rows than harts (decode: one row) and a scratch area in the header (host-zeroed,
 * >= 64 * (2 * harts + 1) bytes: the counter line, then two sets of one line per hart, used by
 * alternate rows so that row r + 1's stores cannot overwrite partials still being read): every row is split over all
 * harts in 16-element pieces; each hart stores its partial sum of squares with a global store (amoswapg.w, past the
 * caches), arrives at a global counter (amoaddg.w; it only grows: row r is done at (r + 1) * harts arrivals, so no
 * reset within the launch), spins on it with global reads (amoorg.w), sums the partials in rank order (global reads: no
 * stale cache line) and scales its own piece.
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
  const EtSpmd sp = et_spmd(&p->h);
  const int64_t rows = ne1 * ne2 * a->ne[3];
  if (rows < sp.n && p->h.scratch && p->h.scratch_bytes >= 64ull * (2 * sp.n + 1)) {
    volatile uint32_t* counter = (volatile uint32_t*)(uintptr_t)p->h.scratch;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
      const float* x = (const float*)(uintptr_t)(a->addr + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3]);
      float* y = (float*)(uintptr_t)(d->addr + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
      int64_t c0, c1;
      et_split(sp, n, 16, &c0, &c1);
      const float part = c1 > c0 ? sum_squares(x + c0, c1 - c0) : 0.0f;
      const uint64_t slots = p->h.scratch + 64ull * (1 + (uint64_t)(r % 2) * sp.n); /* two sets: row r+1 may start */
      et_amoswapg_w((volatile uint32_t*)(uintptr_t)(slots + 64ull * sp.rank), et_f32_bits(part));
      et_fence();
      et_amoaddg_w(counter, 1);
      const uint32_t target = (uint32_t)((r + 1) * sp.n);
      while (et_amoorg_w(counter, 0) < target) {
      }
      float sum = 0.0f;
      for (uint32_t h = 0; h < sp.n; ++h)
        sum += et_bits_f32(et_amoorg_w((volatile uint32_t*)(uintptr_t)(slots + 64ull * h), 0));
      if (c1 > c0) scale_row(y + c0, x + c0, et_rsqrtf(sum * inv_n + p->eps), c1 - c0);
    }
    return ET_STATUS_OK;
  }
  int64_t r0, r1;
  et_split(sp, rows, row_grain(n), &r0, &r1);
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
