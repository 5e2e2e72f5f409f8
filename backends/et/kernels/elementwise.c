/* elementwise.c - ADD, MUL, DIV (F32, broadcasting src1), SCALE, SILU and SWIGLU (F32, same shapes).
 *
 * Layout: rows of ne[0] contiguous floats (nb[0] = 4); the other dims by stride. b broadcasts:
 * b index = dst index mod b.ne in each dim (graph Op::Add / Op::Mul).
 * SPMD: the dst rows are split over the harts in groups whose size makes every group start on
 * a 64-byte line (so two minions never write one line); within a row 8 lanes at a time
 * (flw.ps / fadd.ps or fmul.ps / fsw.ps), b either a full row or one value broadcast (fbc.ps),
 * the tail (ne[0] % 8) in scalar code. DIV: scalar et_divf per element (no packed divide; its
 * rows are short: the MoE router's weight normalisation). SCALE: MUL by one broadcast value.
 * SILU: x * sigmoid(x); SWIGLU: silu(a) * b; sigmoid = 1/(1 + e^-x) with et_math.h's exp and
 * reciprocal (et_silu8: 8 lanes; the same steps in scalar code for the tail). The CPU uses
 * llama.cpp's polynomial exp: results differ by a few ulp (et_math.h bounds: silu 2e-7 rel.).
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

static int64_t row_grain(int64_t ne0) {
  int64_t r = ne0 % 16, g = 1;
  if (r == 0) return 1;
  while ((g * r) % 16 != 0) ++g;
  return g;
}

static const uint8_t* row_of(const EtTensor* t, int64_t i1, int64_t i2, int64_t i3) {
  return (const uint8_t*)(uintptr_t)t->addr + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

enum { OP_ADD = 0, OP_MUL = 1, OP_DIV = 2 };

/* out[0:n) = a[0:n) op b[0:n) (b_step 1) or op b[0] (b_step 0). */
static void row_op(int mul, float* out, const float* a, const float* b, int64_t n, int b_step) {
  int64_t i = 0;
  if (mul == OP_DIV) {
    for (; i < n; ++i) out[i] = et_divf(a[i], b_step ? b[i] : b[0]);
    return;
  }
  if (b_step) {
    if (mul)
      for (; i + 8 <= n; i += 8)
        __asm__ volatile(ETI_FLW(ft0, 0, a) ETI_FLW(ft1, 0, b) ETI_FMUL(ft2, ft0, ft1) ETI_FSW(ft2, 0, o)
                         :
                         : [a] "r"(a + i), [b] "r"(b + i), [o] "r"(out + i)
                         : "ft0", "ft1", "ft2", "memory");
    else
      for (; i + 8 <= n; i += 8)
        __asm__ volatile(ETI_FLW(ft0, 0, a) ETI_FLW(ft1, 0, b) ETI_FADD(ft2, ft0, ft1) ETI_FSW(ft2, 0, o)
                         :
                         : [a] "r"(a + i), [b] "r"(b + i), [o] "r"(out + i)
                         : "ft0", "ft1", "ft2", "memory");
    for (; i < n; ++i) out[i] = mul == OP_MUL ? a[i] * b[i] : a[i] + b[i];
  } else {
    if (mul)
      for (; i + 8 <= n; i += 8)
        __asm__ volatile(ETI_FLW(ft0, 0, a) ETI_FBC(ft1, 0, b) ETI_FMUL(ft2, ft0, ft1) ETI_FSW(ft2, 0, o)
                         :
                         : [a] "r"(a + i), [b] "r"(b), [o] "r"(out + i)
                         : "ft0", "ft1", "ft2", "memory");
    else
      for (; i + 8 <= n; i += 8)
        __asm__ volatile(ETI_FLW(ft0, 0, a) ETI_FBC(ft1, 0, b) ETI_FADD(ft2, ft0, ft1) ETI_FSW(ft2, 0, o)
                         :
                         : [a] "r"(a + i), [b] "r"(b), [o] "r"(out + i)
                         : "ft0", "ft1", "ft2", "memory");
    for (; i < n; ++i) out[i] = mul == OP_MUL ? a[i] * b[0] : a[i] + b[0];
  }
}

static int64_t binary(const void* args, int mul) {
  const EtBinaryArgs* p = (const EtBinaryArgs*)args;
  const EtTensor *a = &p->a, *b = &p->b, *d = &p->dst;
  if (a->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (b->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  for (int i = 0; i < 4; ++i) {
    if (d->ne[i] != a->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 2);
    if (b->ne[i] <= 0 || a->ne[i] % b->ne[i] != 0) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  }
  if (a->nb[0] != 4 || b->nb[0] != 4 || d->nb[0] != 4) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (b->ne[0] != 1 && b->ne[0] != a->ne[0]) return et_fail(ET_STATUS_BAD_SHAPE, 1);

  EtSpmd s = et_spmd(&p->h);
  const int64_t ne0 = d->ne[0], ne1 = d->ne[1], ne2 = d->ne[2];
  const int64_t rows = ne1 * ne2 * d->ne[3];
  int64_t r0, r1;
  et_split(s, rows, row_grain(ne0), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    const float* ar = (const float*)row_of(a, i1, i2, i3);
    const float* br = (const float*)row_of(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
    float* dr = (float*)row_of(d, i1, i2, i3);
    row_op(mul, dr, ar, br, ne0, b->ne[0] != 1);
  }
  return ET_STATUS_OK;
}

static int64_t add_f32(const void* args, const EtEnv* env) {
  (void)env;
  return binary(args, OP_ADD);
}
static int64_t mul_f32(const void* args, const EtEnv* env) {
  (void)env;
  return binary(args, OP_MUL);
}
static int64_t div_f32(const void* args, const EtEnv* env) {
  (void)env;
  return binary(args, OP_DIV);
}
ET_KERNEL(ET_K_ADD_F32, add_f32);
ET_KERNEL(ET_K_MUL_F32, mul_f32);
ET_KERNEL(ET_K_DIV_F32, div_f32);

static int64_t scale_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtScaleArgs* p = (const EtScaleArgs*)args;
  const EtTensor *a = &p->src, *d = &p->dst;
  if (a->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  for (int i = 0; i < 4; ++i)
    if (d->ne[i] != a->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (a->nb[0] != 4 || d->nb[0] != 4) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  const int64_t ne0 = d->ne[0], ne1 = d->ne[1], ne2 = d->ne[2];
  const float scale = p->scale;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), ne1 * ne2 * d->ne[3], row_grain(ne0), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    row_op(OP_MUL, (float*)row_of(d, i1, i2, i3), (const float*)row_of(a, i1, i2, i3), &scale, ne0, 0);
  }
  return ET_STATUS_OK;
}
ET_KERNEL(ET_K_SCALE_F32, scale_f32);

/* SILU (b absent) and SWIGLU (dst = silu(a) * b). */
static int64_t glu(const EtArgsHeader* h, const EtTensor* a, const EtTensor* b, const EtTensor* d) {
  const int gated = b != 0;
  if (a->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (gated && b->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  for (int i = 0; i < 4; ++i) {
    if (d->ne[i] != a->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 2);
    if (gated && b->ne[i] != a->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  }
  if (a->nb[0] != 4 || d->nb[0] != 4 || (gated && b->nb[0] != 4)) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  const int64_t ne0 = d->ne[0], ne1 = d->ne[1], ne2 = d->ne[2];
  int64_t r0, r1;
  et_split(et_spmd(h), ne1 * ne2 * d->ne[3], row_grain(ne0), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    const float* ar = (const float*)row_of(a, i1, i2, i3);
    const float* br = gated ? (const float*)row_of(b, i1, i2, i3) : 0;
    float* dr = (float*)row_of(d, i1, i2, i3);
    int64_t i = 0;
    for (; i + 8 <= ne0; i += 8) et_silu8(dr + i, ar + i, br ? br + i : 0);
    for (; i < ne0; ++i) dr[i] = gated ? et_siluf(ar[i]) * br[i] : et_siluf(ar[i]);
  }
  return ET_STATUS_OK;
}

static int64_t silu_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtUnaryArgs* p = (const EtUnaryArgs*)args;
  return glu(&p->h, &p->src, 0, &p->dst);
}
static int64_t swiglu_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtSwigluArgs* p = (const EtSwigluArgs*)args;
  return glu(&p->h, &p->a, &p->b, &p->dst);
}
ET_KERNEL(ET_K_SILU_F32, silu_f32);
ET_KERNEL(ET_K_SWIGLU_F32, swiglu_f32);
