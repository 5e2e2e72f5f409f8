#!/usr/bin/env python3
"""Fails (exit 1) if an ET-SoC-1 kernel image contains an instruction the chip does not
implement, naming the image, the kernel (enclosing symbol), the address and the instruction.

Not implemented on ET-SoC-1 (docs: ../shared/docs/et-soc.md section 2.8; sys_emu traps them
with mcause 30): fdiv.s, fsqrt.s, fcvt.{l,lu}.s, fcvt.s.{l,lu} (standard OP-FP encodings) and
the ET packed fdiv.ps, fsqrt.ps, frsq.ps, fsin.ps, fdiv.pi, fdivu.pi, frem.pi, fremu.pi
(custom-3). Every 32-bit instruction word is decoded from the disassembly's raw bytes, so
instructions emitted with .insn are caught as well as the ones the compiler names.

Usage: scripts/check_et_kernels.py [--objdump PATH] IMAGE.elf..."""
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([0-9a-f]+):\s+([0-9a-f]{8})\s")
SYMBOL = re.compile(r"^[0-9a-f]+ <([^>]+)>:")


def forbidden(word):
    """Name of the unimplemented instruction encoded by `word`, or None."""
    opcode, funct3, rs2, funct7 = word & 0x7F, (word >> 12) & 7, (word >> 20) & 0x1F, word >> 25
    if opcode == 0x53:  # OP-FP, single precision (fmt 00)
        if funct7 == 0x0C: return "fdiv.s"
        if funct7 == 0x2C and rs2 == 0: return "fsqrt.s"
        if funct7 == 0x60 and rs2 == 2: return "fcvt.l.s"
        if funct7 == 0x60 and rs2 == 3: return "fcvt.lu.s"
        if funct7 == 0x68 and rs2 == 2: return "fcvt.s.l"
        if funct7 == 0x68 and rs2 == 3: return "fcvt.s.lu"
        if funct7 in (0x0D, 0x2D): return "fdiv.d/fsqrt.d"  # no D extension either
    if opcode == 0x7B:  # custom-3: ET packed
        if funct7 == 0x0C: return "fdiv.ps"
        if funct7 == 0x0F and funct3 <= 3: return ("fdiv.pi", "fdivu.pi", "frem.pi", "fremu.pi")[funct3]
        if funct7 == 0x2C and funct3 == 0 and rs2 == 0: return "fsqrt.ps"
        if funct7 == 0x2C and funct3 == 0 and rs2 == 6: return "fsin.ps"
        if funct7 == 0x2C and funct3 == 0 and rs2 == 8: return "frsq.ps"
    return None


def check(objdump, elf):
    dis = subprocess.run([objdump, "-d", "-z", elf], capture_output=True, text=True)
    if dis.returncode != 0:
        print(f"check_et_kernels: {objdump} failed on {elf}: {dis.stderr.strip()}", file=sys.stderr)
        return 1
    errors, symbol, n = [], "?", 0
    for line in dis.stdout.splitlines():
        m = SYMBOL.match(line)
        if m:
            symbol = m.group(1)
            continue
        m = LINE.match(line)
        if not m:
            continue
        n += 1
        name = forbidden(int(m.group(2), 16))
        if name:
            errors.append(f"{elf}: kernel {symbol} at 0x{m.group(1)}: {name} is not implemented by ET-SoC-1 "
                          f"({line.strip()})")
    if n == 0:
        errors.append(f"{elf}: no instructions found in the disassembly")
    for e in errors:
        print(f"check_et_kernels: {e}", file=sys.stderr)
    return 1 if errors else 0


def main():
    args = sys.argv[1:]
    objdump = "riscv64-unknown-elf-objdump"
    if args[:1] == ["--objdump"]:
        objdump, args = args[1], args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    return max(check(objdump, a) for a in args)


if __name__ == "__main__":
    sys.exit(main())
