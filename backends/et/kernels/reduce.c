/* reduce.c - row reductions and selections on F32 rows: SOFTMAX, SUM_ROWS, TOP_K (the MoE router's
 * ops: softmax over the expert logits, the top-k experts, the sum that renormalises their weights),
 * and CPY (f32 rows to f32 or f16, the row-wise copy a graph makes contiguous or converts).
 *
 * Layout: src rows of ne[0] contiguous floats (nb[0] = 4), the other dims by stride; dst rows
 * contiguous and back to back (dst[r] at dst.addr + r * dst row bytes), line-aligned at the base.
 * SPMD: the rows are split over the harts in groups whose dst bytes fill whole 64-byte lines
 * (SUM_ROWS: 16 rows of one float; TOP_K: rows of k int32), so no two minions write one line.
 * SOFTMAX: max over the row, y = e^(x - max) 8 lanes at a time (et_exp8; the tail with the
 * scalar et_expf, the same steps), the sum in f32 in order, then y * (1/sum) (et_recipf). The
 * CPU sums in double (llama.cpp's order): the results differ by a few ulp.
 * SUM_ROWS: 8 lane partial sums (fadd.ps), a pairwise lane sum, then the tail in scalar code.
 * TOP_K: k passes over the row, each picking the largest value below the previous pick in the
 * order (value descending, index ascending): exactly the CPU's partial sort, ties included.
 * CPY: element by element, f16 by et_f32_to_f16 (round to nearest even, as the CPU).
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

/* Rows per group so that a group's dst bytes are whole lines. */
static int64_t line_grain(int64_t row_bytes) {
  int64_t g = 1;
  while ((g * row_bytes) % ET_LINE_BYTES != 0) ++g;
  return g;
}

static const float* src_row(const EtTensor* t, int64_t r) {
  const int64_t ne1 = t->ne[1], ne2 = t->ne[2];
  const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
  return (const float*)(uintptr_t)(t->addr + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

/* Common checks: src F32 with contiguous rows, dst of type `dt`, dst rows of `dst_ne0` elements
 * back to back and line-aligned, the same row count. */
static int64_t check_rows(const EtTensor* s, const EtTensor* d, uint32_t dt, int64_t dst_ne0) {
  const uint64_t es = dt == ET_TYPE_F16 ? 2 : 4;
  if (s->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (d->type != dt) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (s->nb[0] != 4) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (d->ne[0] != dst_ne0 || d->ne[1] != s->ne[1] || d->ne[2] != s->ne[2] || d->ne[3] != s->ne[3])
    return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (d->nb[0] != es || d->nb[1] != es * (uint64_t)dst_ne0 || d->nb[2] != d->nb[1] * (uint64_t)d->ne[1] ||
      d->nb[3] != d->nb[2] * (uint64_t)d->ne[2])
    return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (d->addr % ET_LINE_BYTES != 0) return et_fail(ET_STATUS_BAD_ALIGN, 1);
  return ET_STATUS_OK;
}

static int64_t softmax_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtUnaryArgs* p = (const EtUnaryArgs*)args;
  const EtTensor *s = &p->src, *d = &p->dst;
  const int64_t n = s->ne[0];
  int64_t st = check_rows(s, d, ET_TYPE_F32, n);
  if (st != ET_STATUS_OK) return st;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), (int64_t)s->ne[1] * s->ne[2] * s->ne[3], line_grain(4 * n), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = src_row(s, r);
    float* y = (float*)(uintptr_t)d->addr + r * n;
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    int64_t i = 0;
    for (; i < n; ++i) y[i] = x[i] - mx;
    for (i = 0; i + 8 <= n; i += 8) et_exp8(y + i, y + i);
    for (; i < n; ++i) y[i] = et_expf(y[i]);
    float sum = 0.0f;
    for (i = 0; i < n; ++i) sum += y[i];
    const float inv = et_recipf(sum);
    for (i = 0; i < n; ++i) y[i] *= inv;
  }
  return ET_STATUS_OK;
}

static int64_t sum_rows_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtUnaryArgs* p = (const EtUnaryArgs*)args;
  const EtTensor *s = &p->src, *d = &p->dst;
  const int64_t n = s->ne[0];
  int64_t st = check_rows(s, d, ET_TYPE_F32, 1);
  if (st != ET_STATUS_OK) return st;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), (int64_t)s->ne[1] * s->ne[2] * s->ne[3], line_grain(4), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = src_row(s, r);
    float sum = 0.0f;
    int64_t i = 0, n8 = n / 8, t;
    if (n8 > 0) {
      const float* xp = x;
      __asm__ volatile(ETI_FBCX(ft0, z) "1:\n\t" ETI_FLW(ft1, 0, x) ETI_FADD(ft0, ft0, ft1) "addi %[x], %[x], 32\n\t"
                                                                                            "addi %[n], %[n], -1\n\t"
                                                                                            "bnez %[n], 1b\n\t" ETI_HSUM8(
                                                                                                ft2, ft0, ft1, t)
                                                                                                "fmv.s %[r], ft2\n\t"
                       : [x] "+r"(xp), [n] "+r"(n8), [r] "=f"(sum), [t] "=&r"(t)
                       : [z] "r"(0)
                       : "ft0", "ft1", "ft2", "memory");
      i = n / 8 * 8;
    }
    for (; i < n; ++i) sum += x[i];
    ((float*)(uintptr_t)d->addr)[r] = sum;
  }
  return ET_STATUS_OK;
}

/* a before b in the TOP_K order: larger value first, equal values by the lower index. */
static int topk_before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

static int64_t top_k_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtTopKArgs* p = (const EtTopKArgs*)args;
  const EtTensor *s = &p->src, *d = &p->dst;
  const int64_t n = s->ne[0], k = p->k;
  if (k < 1 || k > n || n > 4096) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  int64_t st = check_rows(s, d, ET_TYPE_I32, k);
  if (st != ET_STATUS_OK) return st;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), (int64_t)s->ne[1] * s->ne[2] * s->ne[3], line_grain(4 * k), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = src_row(s, r);
    int32_t* out = (int32_t*)(uintptr_t)d->addr + r * k;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int32_t i = 0; i < (int32_t)n; ++i) {
        if (j > 0 && !topk_before(x[out[j - 1]], out[j - 1], x[i], i)) continue; /* taken already */
        if (best < 0 || topk_before(x[i], i, x[best], best)) best = i;
      }
      if (best < 0) return et_fail(ET_STATUS_BAD_INDEX, (uint32_t)j); /* NaNs: no order */
      out[j] = best;
    }
  }
  return ET_STATUS_OK;
}

static int64_t cpy_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtUnaryArgs* p = (const EtUnaryArgs*)args;
  const EtTensor *s = &p->src, *d = &p->dst;
  const int64_t n = s->ne[0];
  const int f16 = d->type == ET_TYPE_F16;
  int64_t st = check_rows(s, d, f16 ? ET_TYPE_F16 : ET_TYPE_F32, n);
  if (st != ET_STATUS_OK) return st;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), (int64_t)s->ne[1] * s->ne[2] * s->ne[3], line_grain((f16 ? 2 : 4) * n), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = src_row(s, r);
    if (f16) {
      uint16_t* y = (uint16_t*)(uintptr_t)d->addr + r * n;
      for (int64_t i = 0; i < n; ++i) y[i] = et_f32_to_f16(x[i]);
    } else {
      float* y = (float*)(uintptr_t)d->addr + r * n;
      for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    }
  }
  return ET_STATUS_OK;
}

ET_KERNEL(ET_K_CPY_F32, cpy_f32);
ET_KERNEL(ET_K_SOFTMAX_F32, softmax_f32);
ET_KERNEL(ET_K_SUM_ROWS_F32, sum_rows_f32);
ET_KERNEL(ET_K_TOP_K_F32, top_k_f32);
