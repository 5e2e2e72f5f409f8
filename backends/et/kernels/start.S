/* start.S - entry of every kernel image (U-mode, at ET_KERNEL_ENTRY).
 * a0 = argument blob, a1 = environment (from the firmware / boot stub). Sets gp, calls
 * et_dispatch (dispatch.c), then ends the kernel with `ecall`, a0 = its status. */
    .section .text.start, "ax", @progbits
    .globl _start
_start:
    .option push
    .option norelax
    la    gp, __global_pointer$
    .option pop
    call  et_dispatch
    ecall
1:  j     1b
