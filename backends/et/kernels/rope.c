/* rope.c - ROPE (F32 [D, H, T], I32 positions, optional F32 frequency factors), normal and NeoX
 * modes, Llama-3 frequency factors and YaRN, as graph/rope.h computes the angles and
 * backends/cpu/ops/rope.cpp applies them:
 *   theta_extrap = pos, times theta_scale after each pair (float); te = theta_extrap / ff[i]
 *   (et_divf, 1 ulp); theta = freq_scale * te, YaRN-mixed with te; (c, s) = (cos, sin)(theta) *
 *   mscale (et_sincosf: |error| <= 1.2e-7); x0' = fma(x0, c, -(x1 s)), x1' = fma(x0, s, x1 c).
 *   Normal mode rotates (x[2i], x[2i+1]), NeoX (x[i], x[i + n_rot/2]); dims >= n_rot copied.
 * SPMD: the (head, token) rows over the harts in groups starting on 64-byte lines; each hart
 * computes the angles of its rows' positions (n_rot <= 512).
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_runtime.h"

static int64_t row_grain(int64_t ne0) {
  int64_t r = ne0 % 16, g = 1;
  if (r == 0) return 1;
  while ((g * r) % 16 != 0) ++g;
  return g;
}

static void cos_sin(const EtRopeArgs* p, float pos, const float* ff, float* cs) {
  float theta_extrap = pos;
  for (int i = 0; i < p->n_rot / 2; ++i) {
    const float te = ff ? et_divf(theta_extrap, ff[i]) : theta_extrap;
    float theta = p->freq_scale * te;
    if (p->ext_factor != 0.0f) {
      float span = (float)(p->corr_high - p->corr_low);
      if (span < 0.001f) span = 0.001f;
      float y = et_divf((float)i - (float)p->corr_low, span);
      if (y < 0.0f) y = 0.0f;
      if (y > 1.0f) y = 1.0f;
      const float mix = (1.0f - y) * p->ext_factor;
      theta = __builtin_fmaf(theta, 1.0f - mix, te * mix); /* as gcc contracts the CPU's expression */
    }
    float s, c;
    et_sincosf(theta, &s, &c);
    cs[2 * i] = c * p->mscale;
    cs[2 * i + 1] = s * p->mscale;
    theta_extrap *= p->theta_scale;
  }
}

static int64_t rope_f32(const void* args, const EtEnv* env) {
  (void)env;
  const EtRopeArgs* p = (const EtRopeArgs*)args;
  const EtTensor *x = &p->src, *pos = &p->pos, *ff = &p->freq_factors, *d = &p->dst;
  if (x->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (pos->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (ff->addr && ff->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 3);
  const int64_t D = x->ne[0], H = x->ne[1], T = x->ne[2];
  const int n_rot = p->n_rot;
  if (n_rot <= 0 || n_rot > D || n_rot % 2 != 0 || n_rot > 512) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (p->mode != 0 && p->mode != 2) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  for (int i = 0; i < 4; ++i)
    if (d->ne[i] != x->ne[i]) return et_fail(ET_STATUS_BAD_SHAPE, 3);
  if (pos->ne[0] < T || x->nb[0] != 4 || d->nb[0] != 4) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  const int neox = p->mode == 2;
  const float* factors = ff->addr ? (const float*)(uintptr_t)ff->addr : 0;
  float cs[512];
  int64_t cs_row = -1;
  int64_t r0, r1;
  et_split(et_spmd(&p->h), H * T * x->ne[3], row_grain(D), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t h = r % H, t = (r / H) % T, i3 = r / (H * T);
    if (t != cs_row) {
      cos_sin(p, (float)*(const int32_t*)(uintptr_t)(pos->addr + t * pos->nb[0]), factors, cs);
      cs_row = t;
    }
    const float* src = (const float*)(uintptr_t)(x->addr + h * x->nb[1] + t * x->nb[2] + i3 * x->nb[3]);
    float* dst = (float*)(uintptr_t)(d->addr + h * d->nb[1] + t * d->nb[2] + i3 * d->nb[3]);
    for (int i = 0; i < n_rot / 2; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const int64_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const float x0 = src[a], x1 = src[b];
      dst[a] = __builtin_fmaf(x0, c, -(x1 * s));
      dst[b] = __builtin_fmaf(x0, s, x1 * c);
    }
    for (int64_t i = n_rot; i < D; ++i) dst[i] = src[i];
  }
  return ET_STATUS_OK;
}
ET_KERNEL(ET_K_ROPE_F32, rope_f32);
