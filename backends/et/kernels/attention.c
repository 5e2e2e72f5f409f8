/* attention.c - ATTENTION over an F16 (or F32) KV cache: causal, GQA, masked by sequence, as
 * backends/cpu/ops/attention.cpp defines it (per token t and query head h, kv head
 * g = h / (Hq / Hkv)):
 *   visible cells c: seq(c) == seq(t) and pos(c) <= pos(t);
 *   q rounded to f16 (f16 cache); s_c = dot(k_c, q) * scale (8 fp32 lanes: fgh.ps + fcvt.ps.f16
 *   of the cache row, fmadd.ps, pairwise lane sum);
 *   p_c = e^(s_c - max) / sum (et_math.h exp and reciprocal), rounded to f16 (f16 cache);
 *   out = sum_c p_c v_c (8 lanes per step: acc = fma(v, p, acc), cells in cell order).
 * fcvt.ps.f16 flushes f16 subnormals (|v| < 2^-14) of K and V to zero (the CPU keeps them).
 * The CPU takes llama.cpp's orders and polynomial exp: results differ by the fp32 rounding of
 * the sums and a few ulp of exp; the f16 rounding of p may then land one f16 step apart.
 * No visible cell: zeros. SPMD: (token, head) pairs over the harts, in groups whose outputs
 * start on 64-byte lines. Limits: Dk, Dv <= 256 and multiples of 8, n_cells <= 8192 (the
 * scores live on the hart's stack), else ET_STATUS_BAD_SHAPE.
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

#define ATTN_MAX_CELLS 8192
#define ATTN_MAX_D 256

static const int32_t k_off16[8] = {0, 2, 4, 6, 8, 10, 12, 14};

/* dot of an f16 cache row with q (floats), n % 8 == 0 */
static float dot_k_f16(const uint16_t* k, const float* q, int64_t n) {
  float r;
  int64_t c = n / 8, t;
  __asm__ volatile(ETI_FBCX(ft0, z) ETI_FLW(ft3, 0, o) "1:\n\t" ETI_FGH(ft1, ft3, k) ETI_FCVT_PS_F16(ft1, ft1)
                       ETI_FLW(ft2, 0, q) ETI_FMADD(ft0, ft1, ft2, ft0)
                           "addi %[k], %[k], 16\n\taddi %[q], %[q], 32\n\taddi %[c], %[c], -1\n\tbnez %[c], 1b\n\t"
                               ETI_HSUM8(ft2, ft0, ft1, t) "fmv.s %[r], ft2\n\t"
                   : [k] "+r"(k), [q] "+r"(q), [c] "+r"(c), [r] "=f"(r), [t] "=&r"(t)
                   : [z] "r"(0), [o] "r"(k_off16)
                   : "ft0", "ft1", "ft2", "ft3", "memory");
  return r;
}

static float dot_k_f32(const float* k, const float* q, int64_t n) {
  float r;
  int64_t c = n / 8, t;
  __asm__ volatile(ETI_FBCX(ft0, z) "1:\n\t" ETI_FLW(ft1, 0, k) ETI_FLW(ft2, 0, q) ETI_FMADD(ft0, ft1, ft2, ft0)
                       "addi %[k], %[k], 32\n\taddi %[q], %[q], 32\n\taddi %[c], %[c], -1\n\tbnez %[c], 1b\n\t"
                           ETI_HSUM8(ft2, ft0, ft1, t) "fmv.s %[r], ft2\n\t"
                   : [k] "+r"(k), [q] "+r"(q), [c] "+r"(c), [r] "=f"(r), [t] "=&r"(t)
                   : [z] "r"(0)
                   : "ft0", "ft1", "ft2", "memory");
  return r;
}

/* acc[0:n) = fma(v, p, acc) */
static void axpy_v_f16(float* acc, const uint16_t* v, float p, int64_t n) {
  int64_t c = n / 8;
  __asm__ volatile(
      ETI_FBC(ft3, 0, p) ETI_FLW(ft4, 0, o) "1:\n\t" ETI_FGH(ft1, ft4, v) ETI_FCVT_PS_F16(ft1, ft1) ETI_FLW(ft0, 0, a)
          ETI_FMADD(ft0, ft1, ft3, ft0) ETI_FSW(
              ft0, 0, a) "addi %[v], %[v], 16\n\taddi %[a], %[a], 32\n\taddi %[c], %[c], -1\n\tbnez %[c], 1b\n\t"
      : [v] "+r"(v), [a] "+r"(acc), [c] "+r"(c)
      : [p] "r"(&p), [o] "r"(k_off16)
      : "ft0", "ft1", "ft3", "ft4", "memory");
}

static void axpy_v_f32(float* acc, const float* v, float p, int64_t n) {
  int64_t c = n / 8;
  __asm__ volatile(
      ETI_FBC(ft3, 0, p) "1:\n\t" ETI_FLW(ft1, 0, v) ETI_FLW(ft0, 0, a) ETI_FMADD(ft0, ft1, ft3, ft0)
          ETI_FSW(ft0, 0, a) "addi %[v], %[v], 32\n\taddi %[a], %[a], 32\n\taddi %[c], %[c], -1\n\tbnez %[c], 1b\n\t"
      : [v] "+r"(v), [a] "+r"(acc), [c] "+r"(c)
      : [p] "r"(&p)
      : "ft0", "ft1", "ft3", "memory");
}

static float round_f16(float x) { return et_f16_to_f32(et_f32_to_f16(x)); }

static int64_t attention(const void* args, uint32_t want) {
  const EtAttentionArgs* p = (const EtAttentionArgs*)args;
  const EtTensor *q = &p->q, *k = &p->k, *v = &p->v, *tok = &p->tokens, *cl = &p->cells, *d = &p->dst;
  if (q->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (k->type != want) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (v->type != want) return et_fail(ET_STATUS_BAD_TYPE, 2);
  if (tok->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 3);
  if (cl->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 4);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 5);
  const int64_t hkv = p->n_head_kv, dk = q->ne[0], hq = q->ne[1], T = q->ne[2], n_cells = k->ne[1];
  if (hkv <= 0 || hq % hkv != 0 || v->ne[0] % hkv != 0) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  const int64_t dv = v->ne[0] / hkv, group = hq / hkv;
  if (dk % 8 || dv % 8 || dk > ATTN_MAX_D || dv > ATTN_MAX_D || k->ne[0] != dk * hkv)
    return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (n_cells > ATTN_MAX_CELLS || v->ne[1] != n_cells || cl->ne[1] < n_cells) return et_fail(ET_STATUS_BAD_SHAPE, 4);
  if (d->ne[0] != dv * hq || d->ne[1] != T || tok->ne[1] < T) return et_fail(ET_STATUS_BAD_SHAPE, 5);
  if (q->nb[0] != 4 || d->nb[0] != 4 || (q->addr | q->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 0);
  const int f16 = want == ET_TYPE_F16;
  const int64_t esize = f16 ? 2 : 4;
  const int32_t* cells = (const int32_t*)(uintptr_t)cl->addr;
  const int32_t* toks = (const int32_t*)(uintptr_t)tok->addr;

  float scores[ATTN_MAX_CELLS];
  float qv[ATTN_MAX_D] __attribute__((aligned(32)));
  float acc[ATTN_MAX_D] __attribute__((aligned(32)));
  int64_t grain = 1;
  while ((grain * dv) % 16 != 0) ++grain;
  int64_t p0, p1;
  et_split(et_spmd(&p->h), T * hq, grain, &p0, &p1);
  for (int64_t pair = p0; pair < p1; ++pair) {
    const int64_t t = pair / hq, h = pair % hq, g = h / group;
    const int32_t pos = toks[2 * t], seq = toks[2 * t + 1];
    const float* qsrc = (const float*)(uintptr_t)(q->addr + h * q->nb[1] + t * q->nb[2]);
    for (int64_t i = 0; i < dk; ++i) qv[i] = f16 ? round_f16(qsrc[i]) : qsrc[i];
    float mx = 0.0f;
    int any = 0;
    for (int64_t c = 0; c < n_cells; ++c) {
      if (cells[2 * c + 1] != seq || cells[2 * c] > pos) continue;
      const uint8_t* kr = (const uint8_t*)(uintptr_t)(k->addr + (uint64_t)c * k->nb[1] + (uint64_t)(g * dk) * esize);
      const float s = (f16 ? dot_k_f16((const uint16_t*)kr, qv, dk) : dot_k_f32((const float*)kr, qv, dk)) * p->scale;
      scores[c] = s;
      if (!any || s > mx) mx = s;
      any = 1;
    }
    float* out = (float*)(uintptr_t)(d->addr + t * d->nb[1]) + h * dv;
    for (int64_t i = 0; i < dv; ++i) acc[i] = 0.0f;
    if (any) {
      float sum = 0.0f;
      for (int64_t c = 0; c < n_cells; ++c) {
        if (cells[2 * c + 1] != seq || cells[2 * c] > pos) continue;
        scores[c] = et_expf(scores[c] - mx);
        sum += scores[c];
      }
      const float inv = et_recipf(sum);
      for (int64_t c = 0; c < n_cells; ++c) {
        if (cells[2 * c + 1] != seq || cells[2 * c] > pos) continue;
        float pc = scores[c] * inv;
        const uint8_t* vr = (const uint8_t*)(uintptr_t)(v->addr + (uint64_t)c * v->nb[1] + (uint64_t)(g * dv) * esize);
        if (f16) axpy_v_f16(acc, (const uint16_t*)vr, round_f16(pc), dv);
        else axpy_v_f32(acc, (const float*)vr, pc, dv);
      }
    }
    for (int64_t i = 0; i < dv; ++i) out[i] = acc[i];
  }
  return ET_STATUS_OK;
}

static int64_t attention_f16(const void* a, const EtEnv* e) {
  (void)e;
  return attention(a, ET_TYPE_F16);
}
static int64_t attention_f32(const void* a, const EtEnv* e) {
  (void)e;
  return attention(a, ET_TYPE_F32);
}
ET_KERNEL(ET_K_ATTENTION_F16, attention_f16);
ET_KERNEL(ET_K_ATTENTION_F32, attention_f32);
