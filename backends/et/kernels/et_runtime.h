/* et_runtime.h - what every kernel source uses (device code only): the ABI, the instruction
 * header, the kernel-table registration, SPMD work splitting and small scalar helpers.
 *
 * Adding a kernel:
 *   1. backends/et/abi/et_kernel_abi.h: a kernel id (EtKernelId + et_kernel_name) and, if no
 *      existing Et*Args fits, an argument struct starting with EtArgsHeader, a multiple of 64
 *      bytes, with its size static-asserted;
 *   2. the family's source here (a new family: a new <family>.c and its name in
 *      OPAL_ET_FAMILIES, cmake/et_kernels.cmake): `static int64_t fn(const void* args, const
 *      EtEnv* env)` checking types and shapes (et_fail(ET_STATUS_BAD_TYPE / BAD_SHAPE, which
 *      tensor) so the host can fall back), splitting its work with et_spmd/et_split so that no
 *      two minions write one 64-byte line, and ET_KERNEL(id, fn);
 *   3. no float division, sqrt or 64-bit int<->float conversion in C (et_math.h instead; the
 *      build rejects the instructions and -mno-fdiv makes `/` a link error); packed code from
 *      et_insn.h's fragments inside one asm statement;
 *   4. a test in tests/et_kernels against the CPU op, and the lowering in the host glue.
 */
#ifndef OPAL_ET_RUNTIME_H
#define OPAL_ET_RUNTIME_H

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/kernels/et_insn.h"

typedef int64_t (*EtKernelFn)(const void* args, const EtEnv* env);

/* Runs the kernel a blob's header names (dispatch.c): the image's entry point, and what the fused
 * dispatcher (fused.c) calls for each sub-op. */
int64_t et_dispatch(const void* args, const EtEnv* env);

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

/* f32 -> f16 bits, round to nearest even (overflow to inf, subnormals kept). */
static inline uint16_t et_f32_to_f16(float f) {
  uint32_t x = et_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (ax < 0x38800000u) {                                   /* f16 subnormal or zero */
    if (ax < 0x33000000u) return (uint16_t)sign;            /* < 2^-25: rounds to 0 */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* value = m * 2^(e-150); f16 units of 2^-24 -> shift 126 - e */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return (uint16_t)(sign | q);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1); /* round the 13 dropped bits to nearest even */
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* Stores a float to a scalar result register out of an asm block: see the kernels. */

#endif /* OPAL_ET_RUNTIME_H */
