/* et_insn.h - ET-SoC-1 minion instructions for the stock GNU toolchain (device code only).
 *
 * Debian's riscv64-unknown-elf-gcc does not know the ET mnemonics; every ET instruction is
 * emitted with the assembler's .insn directive (encodings from sw-sysemu's decoder) and ET
 * CSRs are written by number. Two kinds of wrappers:
 *   - ETI_* string fragments for the packed (256-bit, 8 x fp32 / int32) instructions. GCC
 *     sees f registers as 32-bit floats, so a packed value may only live inside one asm
 *     statement: kernels compose these fragments in one asm block per inner loop, name fixed
 *     caller-saved registers (ft0-ft11, fa0-fa7) and list them as clobbers;
 *   - static inline functions for everything scalar: hart id, cycle counter, cache
 *     maintenance, global atomics, fences.
 * Mask register m0 predicates the packed ops; the boot stub sets m0..m7 = 0xFF (all lanes).
 */
#ifndef OPAL_ET_INSN_H
#define OPAL_ET_INSN_H

#include <stdint.h>

/* ---- packed loads / stores (custom-0, 0x0B) ----------------------------------------------- */
/* flw.ps fd, off(rs1): 8 floats (32 bytes). fsw.ps: store 8 floats. fbc.ps: load one float and
 * broadcast it to the 8 lanes. */
#define ETI_FLW(fd, off, rs1) ".insn i 0x0B, 2, " #fd ", " #off "(%[" #rs1 "])\n\t"
#define ETI_FSW(fs, off, rs1) ".insn s 0x0B, 6, " #fs ", " #off "(%[" #rs1 "])\n\t"
#define ETI_FBC(fd, off, rs1) ".insn i 0x0B, 0, " #fd ", " #off "(%[" #rs1 "])\n\t"
/* Gathers: lane e = sign-extended byte / halfword at rs2 + fs1.i32[e] (fgb / fgh), or the word
 * (fgw). Offsets come from a packed int register. */
#define ETI_FGB(fd, fs1, rs2) ".insn r 0x0B, 1, 0x24, " #fd ", " #fs1 ", %[" #rs2 "]\n\t"
#define ETI_FGH(fd, fs1, rs2) ".insn r 0x0B, 1, 0x28, " #fd ", " #fs1 ", %[" #rs2 "]\n\t"
#define ETI_FGW(fd, fs1, rs2) ".insn r 0x0B, 1, 0x30, " #fd ", " #fs1 ", %[" #rs2 "]\n\t"
/* Scatter: the low byte (fscb.ps) / halfword (fsch.ps) of lane e of `val` to rs2 + fs1.i32[e]. */
#define ETI_FSCB(val, fs1, rs2) ".insn r 0x0B, 1, 0x64, " #val ", " #fs1 ", %[" #rs2 "]\n\t"
#define ETI_FSCH(val, fs1, rs2) ".insn r 0x0B, 1, 0x68, " #val ", " #fs1 ", %[" #rs2 "]\n\t"

/* ---- packed float (custom-3, 0x7B; funct3 = rounding mode, 0 = RNE) ------------------------ */
#define ETI_FADD(fd, a, b) ".insn r 0x7B, 0, 0x00, " #fd ", " #a ", " #b "\n\t"
#define ETI_FSUB(fd, a, b) ".insn r 0x7B, 0, 0x04, " #fd ", " #a ", " #b "\n\t"
#define ETI_FMUL(fd, a, b) ".insn r 0x7B, 0, 0x08, " #fd ", " #a ", " #b "\n\t"
#define ETI_FMIN(fd, a, b) ".insn r 0x7B, 0, 0x14, " #fd ", " #a ", " #b "\n\t"
#define ETI_FMAX(fd, a, b) ".insn r 0x7B, 1, 0x14, " #fd ", " #a ", " #b "\n\t"
/* sign injection: fd = |a| with b's sign (fsgnj), or with the inverted sign (fsgnjn) */
#define ETI_FSGNJ(fd, a, b) ".insn r 0x7B, 0, 0x10, " #fd ", " #a ", " #b "\n\t"
#define ETI_FSGNJN(fd, a, b) ".insn r 0x7B, 1, 0x10, " #fd ", " #a ", " #b "\n\t"
#define ETI_FSGNJX(fd, a, b) ".insn r 0x7B, 2, 0x10, " #fd ", " #a ", " #b "\n\t"
/* fused, one rounding (custom-2, 0x5B, R4): fmadd a*b+c, fmsub a*b-c, fnmsub -(a*b)+c,
 * fnmadd -(a*b)-c */
#define ETI_FMADD(fd, a, b, c) ".insn r4 0x5B, 0, 0, " #fd ", " #a ", " #b ", " #c "\n\t"
#define ETI_FMSUB(fd, a, b, c) ".insn r4 0x5B, 0, 1, " #fd ", " #a ", " #b ", " #c "\n\t"
#define ETI_FNMSUB(fd, a, b, c) ".insn r4 0x5B, 0, 2, " #fd ", " #a ", " #b ", " #c "\n\t"
/* conversions: int32 lanes -> float (RNE), float -> int32 (rounding mode rm), f16 (low half of
 * each lane) -> float, float -> f16 (RNE, in the low half of each lane), round to integral */
#define ETI_FCVT_PS_PW(fd, a) ".insn r 0x7B, 0, 0x68, " #fd ", " #a ", x0\n\t"
#define ETI_FCVT_PW_PS_RNE(fd, a) ".insn r 0x7B, 0, 0x60, " #fd ", " #a ", x0\n\t"
#define ETI_FCVT_PW_PS_RTZ(fd, a) ".insn r 0x7B, 1, 0x60, " #fd ", " #a ", x0\n\t"
#define ETI_FCVT_PS_F16(fd, a) ".insn r 0x7B, 0, 0x68, " #fd ", " #a ", x10\n\t"
#define ETI_FCVT_F16_PS(fd, a) ".insn r 0x7B, 0, 0x6c, " #fd ", " #a ", x9\n\t"
#define ETI_FROUND_RNE(fd, a) ".insn r 0x7B, 0, 0x2c, " #fd ", " #a ", x1\n\t"
/* fswizz.ps fd, fs1, imm8: lane e = fs1 lane (e & ~3) | imm8 bits [2(e%4)+1 : 2(e%4)]; imm8 bits
 * 2:0 sit in funct3, bits 7:3 in the rs2 field. SWAP1: 1 0 3 2 (imm 0xB1), SWAP2: 2 3 0 1 (0x4E). */
#define ETI_FSWIZZ_SWAP1(fd, a) ".insn r 0x7B, 1, 0x73, " #fd ", " #a ", x22\n\t"
#define ETI_FSWIZZ_SWAP2(fd, a) ".insn r 0x7B, 6, 0x73, " #fd ", " #a ", x9\n\t"
/* fmvs.x.ps rd, fs1, lane: x register = sign-extended lane (lane 0..7) */
#define ETI_FMVS_X(rd, fs1, lane) ".insn r 0x7B, 2, 0x70, %[" #rd "], " #fs1 ", x" #lane "\n\t"
/* fbcx.ps fd, rs1: all lanes = low 32 bits of an x register */
#define ETI_FBCX(fd, rs1) ".insn i 0x0B, 3, " #fd ", %[" #rs1 "], 0\n\t"

/* ---- packed int32 lanes (custom-3) ---------------------------------------------------------- */
#define ETI_FADD_PI(fd, a, b) ".insn r 0x7B, 0, 0x03, " #fd ", " #a ", " #b "\n\t"
#define ETI_FSUB_PI(fd, a, b) ".insn r 0x7B, 0, 0x07, " #fd ", " #a ", " #b "\n\t"
#define ETI_FMUL_PI(fd, a, b) ".insn r 0x7B, 0, 0x0b, " #fd ", " #a ", " #b "\n\t"
#define ETI_FAND_PI(fd, a, b) ".insn r 0x7B, 7, 0x03, " #fd ", " #a ", " #b "\n\t"
#define ETI_FOR_PI(fd, a, b) ".insn r 0x7B, 6, 0x03, " #fd ", " #a ", " #b "\n\t"
/* shifts by an immediate 0..31 (in the rs2 field) */
#define ETI_FSLLI_PI(fd, a, sh) ".insn r 0x7B, 1, 0x27, " #fd ", " #a ", x" #sh "\n\t"
#define ETI_FSRLI_PI(fd, a, sh) ".insn r 0x7B, 5, 0x27, " #fd ", " #a ", x" #sh "\n\t"
#define ETI_FSRAI_PI(fd, a, sh) ".insn r 0x7B, 7, 0x27, " #fd ", " #a ", x" #sh "\n\t"

/* Horizontal sum of the 8 lanes of `v` into scalar lane 0 of `dst` (tmp clobbered): pairs via
 * fswizz within each half, then the two halves through an x register. Order: ((l0+l1)+(l2+l3))
 * + ((l4+l5)+(l6+l7)). */
// clang-format off
#define ETI_HSUM8(dst, v, tmp, xtmp)                                                     \
  ETI_FSWIZZ_SWAP1(tmp, v) ETI_FADD(v, v, tmp) ETI_FSWIZZ_SWAP2(tmp, v) ETI_FADD(v, v, tmp) \
  ".insn r 0x7B, 2, 0x70, %[" #xtmp "], " #v ", x4\n\t"                                  \
  "fmv.w.x " #tmp ", %[" #xtmp "]\n\t"                                                   \
  "fadd.s " #dst ", " #v ", " #tmp "\n\t"
// clang-format on

/* ---- masks ---------------------------------------------------------------------------------- */
/* mova.m.x rs1: m0..m7 = the 8 bytes of rs1 (m0 = bits 7:0) */
#define ETI_MOVA_M_X(rs1) ".insn r 0x7B, 1, 0x6B, x0, %[" #rs1 "], x0\n\t"

/* ---- scalar helpers ------------------------------------------------------------------------- */
#define ET_CSR_TENSOR_WAIT 0x830
#define ET_CSR_EVICT_VA 0x89f
#define ET_CSR_FLUSH_VA 0x8bf
#define ET_CSR_HARTID 0xcd0
#define ET_CSR_HPMCOUNTER3 0xc03
#define ET_WAIT_CACHEOPS 6

/* Destination levels of EvictVA / FlushVA (bits 59:58). */
#define ET_CACHE_L2 1ull
#define ET_CACHE_L3 2ull
#define ET_CACHE_MEM 3ull

/* Hart id (U-mode readable once the boot stub enabled the shadow CSRs). */
static inline uint64_t et_hart_id(void) {
  uint64_t h;
  __asm__ volatile("csrr %0, 0xcd0" : "=r"(h));
  return h;
}

/* Emulated cycles: hpmcounter3, which the boot stub points at the cycle event. sys_emu reads it
 * as k * cycles, k = the harts of the neighbourhood counting the event (see boot.c,
 * read_cycles): two reads one cycle apart give k. */
static inline uint64_t et_cycles(void) {
  uint64_t a, b;
  __asm__ volatile("csrr %0, 0xc03\n\tcsrr %1, 0xc03" : "=&r"(a), "=r"(b));
  return b > a ? a / (b - a) : 0;
}

static inline void et_fence(void) { __asm__ volatile("fence" ::: "memory"); }

/* Write back and invalidate `bytes` starting at p (whole 64-byte lines) from this minion's L1
 * to `dest`, then wait for the cache operations to finish. At most 16 lines per operation. */
static inline void et_evict(uint64_t dest, const volatile void* p, uint64_t bytes) {
  uint64_t a = (uint64_t)(uintptr_t)p & ~63ull;
  uint64_t end = (uint64_t)(uintptr_t)p + bytes;
  register uint64_t stride __asm__("x31") = 64;
  __asm__ volatile("fence" ::: "memory");
  while (a < end) {
    uint64_t lines = (end - a + 63) / 64;
    if (lines > 16) lines = 16;
    uint64_t v = (dest << 58) | (a & 0x0000FFFFFFFFFFC0ull) | (lines - 1);
    __asm__ volatile("csrw 0x89f, %0" : : "r"(v), "r"(stride) : "memory");
    a += lines * 64;
  }
  __asm__ volatile("csrwi 0x830, 6" ::: "memory");
}

/* Global atomics (performed at memory, coherent across minions and shires). */
static inline uint32_t et_amoaddg_w(volatile uint32_t* p, uint32_t v) {
  uint32_t old;
  __asm__ volatile(".insn r 0x3B, 2, 0x01, %0, %1, %2" : "=r"(old) : "r"(p), "r"(v) : "memory");
  return old;
}
static inline uint32_t et_amoorg_w(volatile uint32_t* p, uint32_t v) {
  uint32_t old;
  __asm__ volatile(".insn r 0x3B, 2, 0x21, %0, %1, %2" : "=r"(old) : "r"(p), "r"(v) : "memory");
  return old;
}
static inline uint32_t et_amoswapg_w(volatile uint32_t* p, uint32_t v) {
  uint32_t old;
  __asm__ volatile(".insn r 0x3B, 2, 0x05, %0, %1, %2" : "=r"(old) : "r"(p), "r"(v) : "memory");
  return old;
}
static inline uint64_t et_amoaddg_d(volatile uint64_t* p, uint64_t v) {
  uint64_t old;
  __asm__ volatile(".insn r 0x3B, 3, 0x01, %0, %1, %2" : "=r"(old) : "r"(p), "r"(v) : "memory");
  return old;
}

#endif /* OPAL_ET_INSN_H */
