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

/* Idle about 2n cycles in registers (n iterations of addi + bnez): no memory access. */
static inline void et_idle(uint32_t n) { __asm__ volatile("1: addi %0, %0, -1\n\tbnez %0, 1b" : "+r"(n)); }

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

/* ---- tensor unit (CSR writes; only the even hart of a minion may issue them) ---------------- *
 * Field layouts from sw-sysemu insns/tensors.cpp. The L1 scratchpad (SCP: 48 lines of 64 bytes
 * per minion) must be on: the launch asks for it (the host's LaunchRequest.scratchpad). */
#define ET_SCP_LINES 48

/* TensorLoad (0x83f): `rows` (1..16) 64-byte lines from `addr` (64-byte aligned), `stride` bytes
 * apart (a multiple of 64), into SCP lines start, start + 1, ... (mod 48), as they are (cmd 0);
 * stride and load id 0 go in x31. */
static inline void et_tensor_load(uint64_t start, const void* addr, uint64_t rows, uint64_t stride) {
  uint64_t v = ((start & 0x3F) << 53) | ((uint64_t)(uintptr_t)addr & 0x0000FFFFFFFFFFC0ull) | ((rows - 1) & 0xF);
  register uint64_t x31 __asm__("x31") = stride & ~63ull;
  __asm__ volatile("csrw 0x83f, %0" : : "r"(v), "r"(x31) : "memory");
}

/* TensorFMA (0x801) types */
#define ET_TFMA_FP16 1ull
#define ET_TFMA_INT8 3ull
/* Control word of an int8 TensorFMA: C[i][j] = sum_k A[i][k] * B[k][j], signed int8, int32
 * accumulation from zero, for i < arows (1..16), j < 16, k < kbytes (4..64, a multiple of 4). A
 * row i is SCP line astart + i, bytes aoff4 * 4 + k; B is kbytes / 4 SCP lines from bstart, line
 * g holding the 16 columns' k = 4g..4g+3 as 4 consecutive bytes each (column j at bytes 4j..4j+3).
 * tenc2rf on: the int32 result lands in f registers 2i (columns 0-7) and 2i + 1 (8-15). */
static inline uint64_t et_tensor_ima8_ctrl(uint64_t arows, uint64_t kbytes, uint64_t aoff4, uint64_t astart,
                                           uint64_t bstart) {
  return (3ull << 55) | (((arows - 1) & 0xF) << 51) | (((kbytes / 4 - 1) & 0xF) << 47) | ((aoff4 & 0xF) << 43) |
         (1ull << 23) | ((bstart & 0x3F) << 12) | ((astart & 0x3F) << 4) | (ET_TFMA_INT8 << 1) | 1ull;
}
/* Control word of an fp16 TensorFMA (TensorFMA16A32): C[i][j] = sum_k A[i][k] * B[k][j], fp16
 * products summed in fp32 (round toward zero), from zero, for i < arows, j < 16, k < kvals (2..32,
 * even). A row i: SCP line astart + i, halves aoff2 * 2 + k; B: kvals / 2 SCP lines from bstart,
 * line g holding column j's k = 2g, 2g+1 at halves 2j, 2j+1. Result (fp32) in f registers 2i,
 * 2i + 1. */
static inline uint64_t et_tensor_fma16_ctrl(uint64_t arows, uint64_t kvals, uint64_t aoff2, uint64_t astart,
                                            uint64_t bstart) {
  return (3ull << 55) | (((arows - 1) & 0xF) << 51) | (((kvals / 2 - 1) & 0xF) << 47) | ((aoff2 & 0xF) << 43) |
         ((bstart & 0x3F) << 12) | ((astart & 0x3F) << 4) | (ET_TFMA_FP16 << 1) | 1ull;
}

/* Issues the TensorFMA `ctrl`, waits for it (TensorWait 7) and stores the 16 x 16 result tile
 * (f0..f31, 32-bit lanes) to `out` (1 KiB, 32-byte aligned): row i at out + 64 i. One asm
 * statement: the compiler may use no f register between the FMA and the stores. */
static inline void et_tensor_fma_store(uint64_t ctrl, void* out) {
  __asm__ volatile(
      "csrw 0x801, %[c]\n\tcsrwi 0x830, 7\n\t" ETI_FSW(f0, 0, o) ETI_FSW(f1, 32, o) ETI_FSW(f2, 64, o)
          ETI_FSW(f3, 96, o) ETI_FSW(f4, 128, o) ETI_FSW(f5, 160, o) ETI_FSW(f6, 192, o) ETI_FSW(f7, 224, o)
              ETI_FSW(f8, 256, o) ETI_FSW(f9, 288, o) ETI_FSW(f10, 320, o) ETI_FSW(f11, 352, o) ETI_FSW(f12, 384, o)
                  ETI_FSW(f13, 416, o) ETI_FSW(f14, 448, o) ETI_FSW(f15, 480, o) ETI_FSW(f16, 512, o)
                      ETI_FSW(f17, 544, o) ETI_FSW(f18, 576, o) ETI_FSW(f19, 608, o) ETI_FSW(f20, 640, o)
                          ETI_FSW(f21, 672, o) ETI_FSW(f22, 704, o) ETI_FSW(f23, 736, o) ETI_FSW(f24, 768, o)
                              ETI_FSW(f25, 800, o) ETI_FSW(f26, 832, o) ETI_FSW(f27, 864, o) ETI_FSW(f28, 896, o)
                                  ETI_FSW(f29, 928, o) ETI_FSW(f30, 960, o) ETI_FSW(f31, 992, o)
      :
      : [c] "r"(ctrl), [o] "r"(out)
      : "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12", "f13", "f14", "f15", "f16",
        "f17", "f18", "f19", "f20", "f21", "f22", "f23", "f24", "f25", "f26", "f27", "f28", "f29", "f30", "f31",
        "memory");
}

/* The tensor_error CSR (0x808): sticky flags of this hart's failed tensor operations (bit 4: the
 * L1 scratchpad is off, 6: an unpaired TensorLoad to B, 7: an address fault, 8: a bad store). */
static inline uint64_t et_tensor_error(void) {
  uint64_t v;
  __asm__ volatile("csrr %0, 0x808" : "=r"(v) : : "memory");
  return v;
}

/* TensorWait (0x830): returns when this hart's tensor loads (id 0) / FMA are done. */
static inline void et_tensor_wait_load(void) { __asm__ volatile("csrwi 0x830, 0" ::: "memory"); }
static inline void et_tensor_wait_fma(void) { __asm__ volatile("csrwi 0x830, 7" ::: "memory"); }

#endif /* OPAL_ET_INSN_H */
