/* driver_probe.c - one kernel with a mode per driver-test case
 * (tests/et/test_et_driver.cpp): what the seam must report for a kernel that
 * works, traps, runs forever, fails, or breaks coherence.
 * Argument blob (struct probe_args, 40 bytes):
 *   mode 0: out[i] = in[i] * 3 + hartcount over n int32 (a multiple of 16),
 *           split by 64-byte lines over the harts of the launch;
 *   mode 1: hart `target` executes fdiv.s (not in ET-SoC-1: mcause 30);
 *   mode 2: every hart loops forever;
 *   mode 3: hart `target` returns 7 (a kernel-reported failure);
 *   mode 4: the lowest hart writes a line with plain stores and raises a flag
 *           with a global atomic; the highest hart (another minion) waits for
 *           the flag and reads the line without the producer's evict: a
 *           coherence hazard for the checker;
 *   mode 5: like 4 with the producer's fence + EvictVA to L3: no hazard. */
#include <stdint.h>

struct probe_args {
  uint32_t mode, target;
  uint32_t n, pad;
  uint64_t in, out, flag;
};
struct env {
  uint64_t version, shire_mask, mhz;
};

static inline uint32_t amoswapg(volatile uint32_t* p, uint32_t v) {
  uint32_t r;
  __asm__ volatile(".insn r 0x3B, 2, 0x05, %0, %1, %2" : "=r"(r) : "r"(p), "r"(v) : "memory");
  return r;
}
static inline uint32_t amoorg(volatile uint32_t* p, uint32_t v) {
  uint32_t r;
  __asm__ volatile(".insn r 0x3B, 2, 0x21, %0, %1, %2" : "=r"(r) : "r"(p), "r"(v) : "memory");
  return r;
}
static inline void evict_l3(const volatile void* p) {
  uint64_t v = (2ull << 58) | ((uint64_t)p & 0xFFFFFFFFFFC0ull);
  register uint64_t stride __asm__("x31") = 64;
  __asm__ volatile("fence\n\tcsrw 0x89f, %0\n\tcsrwi 0x830, 6" : : "r"(v), "r"(stride) : "memory");
}
static unsigned popcount(uint64_t x) {
  unsigned c = 0;
  for (; x; x &= x - 1) c++;
  return c;
}

int test_main(const struct probe_args* a, const struct env* e, uint64_t hart);
int test_main(const struct probe_args* a, const struct env* e, uint64_t hart) {
  /* harts of the launch: shire mask from the environment, all 32 minions x 2
     threads of each shire the driver enabled (the tests launch whole shires
     or the minions the chip has); rank among the running harts: the tests
     pass the hart count in `target` for mode 0. */
  unsigned shire = (unsigned)(hart >> 6), local = (unsigned)(hart & 63);
  unsigned nshires = popcount(e->shire_mask);
  unsigned below = popcount(e->shire_mask & ((1ull << shire) - 1));
  switch (a->mode) {
    case 0: {
      unsigned per_shire = a->target / nshires, rank = below * per_shire + local;
      unsigned lines = a->n / 16, nh = a->target;
      unsigned first = lines * rank / nh, last = lines * (rank + 1) / nh;
      const int32_t* in = (const int32_t*)a->in;
      int32_t* out = (int32_t*)a->out;
      for (unsigned i = first * 16; i < last * 16; i++) out[i] = in[i] * 3 + (int32_t)nh;
      return 0;
    }
    case 1:
      if (hart == a->target) {
        volatile float x = 1.0f, y = 3.0f;
        float q;
        __asm__ volatile("fdiv.s %0, %1, %2" : "=f"(q) : "f"(x), "f"(y));
        return (int)q;
      }
      return 0;
    case 2:
      for (;;) __asm__ volatile("");
    case 3: return hart == a->target ? 7 : 0;
    case 4:
    case 5: {
      volatile uint32_t* buf = (volatile uint32_t*)a->out;
      volatile uint32_t* flag = (volatile uint32_t*)a->flag;
      if (hart == 0) {
        for (int i = 0; i < 16; i++) buf[i] = 100 + i;
        if (a->mode == 5) evict_l3(buf);
        amoswapg(flag, 1);
      } else if (hart == a->target) {
        while (amoorg(flag, 0) == 0) {
        }
        for (int i = 0; i < 16; i++)
          if (buf[i] != 100u + i) return 1;
      }
      return 0;
    }
    default: return 2;
  }
}
