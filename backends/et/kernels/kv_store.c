/* kv_store.c - KV_STORE: cache[:, cells[t]] = convert(src[:, t]) for a cache of F16 (round to
 * nearest even: fcvt.f16.ps, then fsch.ps scatters the 8 halves; fcvt.f16.ps flushes results
 * below 2^-14 to zero, so those values are redone in software to keep f16 subnormals as the
 * CPU does: the cache bytes are the CPU's bit for bit) or F32 (copy), src F32 [E, T],
 * cells I32 [T]. A cell outside [0, n_cells) is skipped (as the CPU op; the runtime validates).
 * SPMD: tokens over the harts; a cache row is E * 2 (or 4) bytes, which must be a whole number
 * of 64-byte lines so that no two minions write one line (else ET_STATUS_BAD_SHAPE).
 */
#include "backends/et/kernels/et_runtime.h"

static const int32_t k_off16[8] = {0, 2, 4, 6, 8, 10, 12, 14};

static int64_t kv_store(const void* args, uint32_t want) {
  const EtKvStoreArgs* p = (const EtKvStoreArgs*)args;
  const EtTensor *c = &p->cache, *s = &p->src, *cells = &p->cells;
  if (c->type != want) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (s->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (cells->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  const int64_t E = c->ne[0], T = cells->ne[0], esize = want == ET_TYPE_F16 ? 2 : 4;
  if (s->ne[0] != E || s->ne[1] != T || E % 8 != 0) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if ((E * esize) % 64 != 0 || (c->addr | c->nb[1]) % 64 != 0) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (s->nb[0] != 4 || (s->addr | s->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 1);
  int64_t t0, t1;
  et_split(et_spmd(&p->h), T, 1, &t0, &t1);
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t cell = *(const int32_t*)(uintptr_t)(cells->addr + t * cells->nb[0]);
    if (cell < 0 || cell >= c->ne[1]) continue;
    const float* x = (const float*)(uintptr_t)(s->addr + t * s->nb[1]);
    uint8_t* dst = (uint8_t*)(uintptr_t)(c->addr + (uint64_t)cell * c->nb[1]);
    if (want == ET_TYPE_F16) {
      for (int64_t i = 0; i < E; i += 8)
        __asm__ volatile(ETI_FLW(ft1, 0, o) ETI_FLW(ft0, 0, x) ETI_FCVT_F16_PS(ft0, ft0) ETI_FSCH(ft0, ft1, d)
                         :
                         : [o] "r"(k_off16), [x] "r"(x + i), [d] "r"(dst + 2 * i)
                         : "ft0", "ft1", "memory");
      for (int64_t i = 0; i < E; ++i) {
        const uint32_t ax = et_f32_bits(x[i]) & 0x7fffffffu;
        if (ax != 0 && ax < 0x38800000u) ((uint16_t*)dst)[i] = et_f32_to_f16(x[i]);
      }
    } else {
      for (int64_t i = 0; i < E; i += 8)
        __asm__ volatile(ETI_FLW(ft0, 0, x) ETI_FSW(ft0, 0, d)
                         :
                         : [x] "r"(x + i), [d] "r"(dst + 4 * i)
                         : "ft0", "memory");
    }
  }
  return ET_STATUS_OK;
}

static int64_t kv_store_f16(const void* a, const EtEnv* e) {
  (void)e;
  return kv_store(a, ET_TYPE_F16);
}
static int64_t kv_store_f32(const void* a, const EtEnv* e) {
  (void)e;
  return kv_store(a, ET_TYPE_F32);
}
ET_KERNEL(ET_K_KV_STORE_F16, kv_store_f16);
ET_KERNEL(ET_K_KV_STORE_F32, kv_store_f32);
