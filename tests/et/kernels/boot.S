/* boot.S - M-mode start for the driver tests' kernels (tests/et/kernels).
 * The driver starts each hart of a launch here with a0 = argument blob and
 * a1 = environment. This stub turns the FPU on, sets the masks, a trap
 * handler (4 KiB aligned: sys_emu clears mtvec bits 11:1) that reports FAIL,
 * a 4 KiB stack per hart, then calls test_main(args, env, hartid) and ends
 * the hart with PASS (0) or FAIL (nonzero) through validation0. It is a test
 * fixture, not the device runtime (backends/et/kernels owns that). */
    .section .text.boot, "ax", @progbits
    .globl _start
_start:
    li    t0, 0x6000
    csrs  mstatus, t0
    csrw  fcsr, zero
    li    t0, -1
    .insn r 0x7B, 1, 0x6B, x0, t0, x0
    la    t0, trap_entry
    csrw  mtvec, t0
    csrr  a2, mhartid
    slli  t1, a2, 12
    li    sp, 0x8002000000
    sub   sp, sp, t1
    .option push
    .option norelax
    la    gp, __global_pointer$
    .option pop
    call  test_main
    bnez  a0, 1f
    li    t0, 0x1FEED000
    csrw  0x8d0, t0
    j     .
1:  li    t0, 0x50BAD000
    csrw  0x8d0, t0
    j     .

    .section .text.trap, "ax", @progbits
    .balign 4096
trap_entry:
    li    t0, 0x50BAD000
    csrw  0x8d0, t0
    j     .
