/* boot.S - Opal's stand-in for the ET-SoC-1 worker firmware (M-mode, sysemu driver only).
 *
 * Every enabled hart starts at ET_BOOT_ENTRY (the emulator's reset PC) in M-mode and:
 *   1. turns the FPU on (mstatus.FS), clears fcsr, sets masks m0..m7 = 0xFF (all 8 lanes);
 *   2. points mtvec at et_trap_entry (4 KiB aligned: sys_emu clears mtvec bits 11:1);
 *   3. takes its M-mode stack (ET_MSTACK_TOP - hart * ET_MSTACK_SIZE), kept in mscratch for
 *      the trap handler;
 *   4. calls et_boot_prepare (boot.c): checks EtLaunch, enables the shadow CSRs and the
 *      U-mode cycle counter, writes EtEnv and a "running" EtHartRecord, and returns the U-mode
 *      pc, stack, a0 (args) and a1 (env);
 *   5. `mret`s into U-mode with every other register zero.
 * The kernel ends with `ecall` (a0 = its status) or traps; both enter et_trap_entry, which
 * calls et_trap_finish (boot.c: record, L1 write-back, PASS/FAIL signal) and never returns.
 */
#include "backends/et/abi/et_kernel_abi.h"

    .section .text.boot, "ax", @progbits
    .globl _start
_start:
    li    t0, 0x6000
    csrs  mstatus, t0                 /* FS = dirty: FPU and packed ops on */
    csrw  fcsr, zero
    li    t0, -1
    .insn r 0x7B, 1, 0x6B, x0, t0, x0 /* mova.m.x: m0..m7 = 0xFF */
    la    t0, et_trap_entry
    csrw  mtvec, t0

    csrr  a0, mhartid
    slli  t1, a0, 10                  /* ET_MSTACK_SIZE = 1 KiB */
    li    sp, ET_MSTACK_TOP
    sub   sp, sp, t1
    csrw  mscratch, sp
    .option push
    .option norelax
    la    gp, __global_pointer$
    .option pop

    addi  sp, sp, -32
    mv    a1, sp                      /* out[4] = {pc, sp, a0, a1} */
    call  et_boot_prepare             /* a0 = hart id */
    ld    t0, 0(sp)
    csrw  mepc, t0
    li    t0, 0x1800
    csrc  mstatus, t0                 /* MPP = U */
    ld    a0, 16(sp)
    ld    a1, 24(sp)
    ld    sp, 8(sp)
    li    ra, 0
    li    gp, 0
    li    tp, 0
    li    t0, 0
    li    t1, 0
    li    t2, 0
    li    s0, 0
    li    s1, 0
    li    a2, 0
    li    a3, 0
    mret

/* Trap and kernel-return entry. The U-mode sp goes to mscratch, the M stack comes back; a0
 * (the kernel's status on ecall) is passed on. */
    .section .text.trap, "ax", @progbits
    .balign 4096
    .globl et_trap_entry
et_trap_entry:
    csrrw sp, mscratch, sp
    .option push
    .option norelax
    la    gp, __global_pointer$
    .option pop
    csrr  a1, mcause
    csrr  a2, mepc
    csrr  a3, mtval
    csrr  a4, mhartid
    call  et_trap_finish              /* does not return */
1:  j     1b
