/* fused.c - FUSED, the dispatcher of a fused launch ("uberkernel"): one launch runs a command list
 * of sub-ops (EtFusedEntry, et_kernel_abi.h) that would otherwise be one launch each.
 *
 * Every hart of the launch walks the whole list in order:
 *   - SUB_OP: if the sub-op's own header masks include this hart, it runs the sub-op's kernel
 *     through et_dispatch (the same entry a launch of its own reaches, with the same blob, so the
 *     same harts split the same work in the same order: results are bit-identical to op-by-op
 *     launches); else it skips it. A failure return ends the launch at once with that status (the
 *     boot stub records it and stops the emulation); the hart's EtFusedHart says which entry.
 *   - EVICT: EvictVA (write back + invalidate this minion's L1 copies) of the entry's bytes: the
 *     host lists every non-weight byte of the phase before its barrier;
 *   - BARRIER: fence, amoaddg.w on the counter, then global reads of the counter until every hart
 *     of the launch arrived, within barrier_budget cycles (else ET_STATUS_BARRIER_TIMEOUT naming
 *     the entry). The counter only grows: barrier b is passed at b * harts arrivals. Between two
 *     reads a waiting hart idles ~2 * ET_BARRIER_IDLE cycles in registers: a global read is the
 *     costly access (on the card a round trip past the caches; on the emulator a coherence-checker
 *     look-up), and a barrier passed up to that many cycles late costs little next to the
 *     sub-ops. The budget is checked at every read.
 * Progress (EtFusedHart.entry / .arrived) goes out with global stores (amoswapg.w: past every
 * cache) so the host reads it after any failure; per-entry cycles (stats) with amoaddg.d.
 */
#include "backends/et/kernels/et_runtime.h"

/* Loop iterations (about 2 cycles each) a waiting hart idles between two reads of the counter. */
#define ET_BARRIER_IDLE 32u

static int in_set(uint64_t hart, const EtArgsHeader* h) {
  const uint32_t shire = (uint32_t)(hart >> 6), minion = (uint32_t)((hart >> 1) & 31), thread = (uint32_t)(hart & 1);
  return ((h->shire_mask >> shire) & 1) && ((h->minion_mask >> minion) & 1) && thread < h->threads;
}

static int64_t fused(const void* args, const EtEnv* env) {
  const EtFusedArgs* p = (const EtFusedArgs*)args;
  const EtFusedEntry* e = (const EtFusedEntry*)(uintptr_t)p->entries;
  const uint64_t hart = et_hart_id();
  const EtSpmd sp = et_spmd(&p->h);
  volatile uint32_t* counter = (volatile uint32_t*)(uintptr_t)p->sync;
  volatile EtFusedHart* mine = (volatile EtFusedHart*)(uintptr_t)(p->sync + 64ull * (1 + sp.rank));
  uint32_t arrived = 0;
  for (uint32_t i = 0; i < p->count; ++i) {
    const uint64_t t0 = p->stats ? et_cycles() : 0;
    if (e[i].kind == ET_FUSED_EVICT) {
      if (e[i].bytes) et_evict(p->evict_level, (const volatile void*)(uintptr_t)e[i].addr, e[i].bytes);
    } else if (e[i].kind == ET_FUSED_BARRIER) {
      et_fence();
      ++arrived;
      et_amoswapg_w(&mine->arrived, arrived);
      et_amoaddg_w(counter, 1);
      const uint32_t target = arrived * sp.n;
      const uint64_t start = et_cycles();
      while (et_amoorg_w(counter, 0) < target) {
        if (et_cycles() - start > p->barrier_budget) return et_fail(ET_STATUS_BARRIER_TIMEOUT, i);
        et_idle(ET_BARRIER_IDLE);
      }
    } else if (e[i].kind == ET_FUSED_SUB_OP) {
      const EtArgsHeader* h = (const EtArgsHeader*)(uintptr_t)e[i].args;
      if (!h || h->kernel_id == ET_K_FUSED) return et_fail(ET_STATUS_BAD_ENTRY, i);
      if (!in_set(hart, h)) continue;
      et_amoswapg_w(&mine->entry, i + 1);
      const int64_t r = et_dispatch(h, env);
      if (r != ET_STATUS_OK) return r;
    } else {
      return et_fail(ET_STATUS_BAD_ENTRY, i);
    }
    if (p->stats) et_amoaddg_d((volatile uint64_t*)(uintptr_t)(p->stats + 64ull * i), et_cycles() - t0);
  }
  return ET_STATUS_OK;
}
ET_KERNEL(ET_K_FUSED, fused);
