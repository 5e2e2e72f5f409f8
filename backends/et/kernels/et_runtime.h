/* et_runtime.h - what every kernel source uses (device code only): the ABI, the instruction
 * header, the kernel-table registration, SPMD work splitting and small scalar helpers. */
#ifndef OPAL_ET_RUNTIME_H
#define OPAL_ET_RUNTIME_H

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/kernels/et_insn.h"

typedef int64_t (*EtKernelFn)(const void* args, const EtEnv* env);

/* Registers `fn` under `id` in the image's entry table. */
#define ET_KERNEL(id, fn)                                                                                   \
  __attribute__((used, section(".et_kernel_table"), aligned(16))) static const EtKernelEntry fn##_entry = { \
      (id), 0, (uint64_t)(uintptr_t)&fn}

/* A failure return value: status in the low half, detail in the high half. */
static inline int64_t et_fail(uint32_t status, uint32_t detail) { return (int64_t)(((uint64_t)detail << 32) | status); }

/* This hart's place in the launch. */
typedef struct EtSpmd {
  uint32_t rank;
  uint32_t n;
} EtSpmd;

static inline EtSpmd et_spmd(const EtArgsHeader* h) {
  EtSpmd s;
  s.rank = et_hart_rank(et_hart_id(), h->shire_mask, h->minion_mask, h->threads);
  s.n = et_hart_count(h->shire_mask, h->minion_mask, h->threads);
  return s;
}

/* [begin, end) of `total` items for this hart, in chunks of `grain` items (a chunk never
 * straddles two harts: with grain = items per 64-byte line no two minions share a line). */
static inline void et_split(EtSpmd s, int64_t total, int64_t grain, int64_t* begin, int64_t* end) {
  int64_t chunks = (total + grain - 1) / grain;
  int64_t c0 = chunks * s.rank / s.n, c1 = chunks * (s.rank + 1) / s.n;
  *begin = c0 * grain < total ? c0 * grain : total;
  *end = c1 * grain < total ? c1 * grain : total;
}

static inline float et_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
  else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
  else if (man == 0) bits = sign;
  else {
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while (!(man & 0x400u));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  union {
    uint32_t u;
    float f;
  } v = {bits};
  return v.f;
}

static inline uint32_t et_f32_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v = {f};
  return v.u;
}

static inline float et_bits_f32(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } v = {u};
  return v.f;
}

#endif /* OPAL_ET_RUNTIME_H */
