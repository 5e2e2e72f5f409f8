#!/usr/bin/env python3
"""Port-pressure microbenchmark for the AVX2 Q8_0 kernels (issue 18, stop 17).

Writes an assembly file of throughput loops (each instruction alone, pairs of
instructions, and the per-pair instruction mixes of the Q8_0 kernels), builds it
with g++ and prints core cycles per repetition (core cycles from a dependent
scalar add chain; rdtsc, best of 7). Two instructions that take the sum of
their single times when mixed share execution pipes; ones that take the
maximum do not. Usage: scripts/avx2_ports.py [substring filter]. Needs g++
and an x86-64 host with AVX2, FMA, F16C and AVX-VNNI (the vpdpbusd rows).
docs/cpu-kernels.md, "Where the AVX2 Q8_0 pair's time goes", has the reading
on Zen 5.
"""
import os
import subprocess
import sys
import tempfile

GEN = r'''
# Generates ports.S: throughput loops for single instructions and pairs.
# Each function: void f(uint64_t iters) ; loop body repeats the pattern.
ops = {
 # name: template with {d} dest (write-only) ; sources ymm12..15 constant
 "maddubsw": "vpmaddubsw %ymm12, %ymm13, %ymm{d}",
 "maddwd":   "vpmaddwd %ymm12, %ymm13, %ymm{d}",
 "signb":    "vpsignb %ymm12, %ymm13, %ymm{d}",
 "absb":     "vpabsb %ymm12, %ymm{d}",
 "cvtdq2ps": "vcvtdq2ps %ymm12, %ymm{d}",
 "permilps": "vpermilps $0x55, %ymm12, %ymm{d}",
 "permps":   "vpermps %ymm12, %ymm13, %ymm{d}",
 "paddd":    "vpaddd %ymm12, %ymm13, %ymm{d}",
 "pslld":    "vpslld $16, %ymm12, %ymm{d}",
 "psrad":    "vpsrad $16, %ymm12, %ymm{d}",
 "pblendw":  "vpblendw $0xAA, %ymm12, %ymm13, %ymm{d}",
 "pshufb":   "vpshufb %ymm12, %ymm13, %ymm{d}",
 "mulps":    "vmulps %ymm12, %ymm13, %ymm{d}",
 "addps":    "vaddps %ymm12, %ymm13, %ymm{d}",
 "pmullw":   "vpmullw %ymm12, %ymm13, %ymm{d}",
 "pmovsxbw": "vpmovsxbw %xmm12, %ymm{d}",
 "bcastss_m":"vbroadcastss (%rsi), %ymm{d}",
 "loadu_m":  "vmovdqu (%rsi), %ymm{d}",
 "dpbusd":   "{{vex}} vpdpbusd %ymm12, %ymm13, %ymm{d}",
 "cvtph2ps": "vcvtph2ps %xmm12, %ymm{d}",
 "insert128":"vinsertf128 $1, %xmm12, %ymm13, %ymm{d}",
 "fmadd":    None,  # chained on ymm0-7
}
def body(names, reps=4):
    lines = []
    fchain = 0
    dests = [8, 9, 10, 11]
    di = 0
    for r in range(reps):
        for n in names:
            if n == "fmadd":
                lines.append(f"vfmadd231ps %ymm12, %ymm13, %ymm{fchain}")
                fchain = (fchain + 1) % 8
            elif n == "dpbusd":
                # accumulating form: chain on dest; use 8 chains 0-7 as well
                lines.append(f"{{vex}} vpdpbusd %ymm12, %ymm13, %ymm{fchain}")
                fchain = (fchain + 1) % 8
            else:
                lines.append(ops[n].format(d=dests[di % 4]).replace("{{","{").replace("}}","}"))
                di += 1
    return lines
singles = list(ops.keys())
pairs = [("maddubsw","maddwd"),("maddubsw","fmadd"),("maddwd","fmadd"),("cvtdq2ps","fmadd"),
         ("cvtdq2ps","maddwd"),("cvtdq2ps","maddubsw"),("permilps","fmadd"),("permilps","maddwd"),("permilps","cvtdq2ps"),
         ("signb","maddubsw"),("signb","fmadd"),("pslld","maddwd"),("psrad","fmadd"),("psrad","maddwd"),("psrad","cvtdq2ps"),
         ("paddd","maddwd"),("paddd","fmadd"),("pblendw","fmadd"),("pblendw","maddwd"),("absb","maddwd"),
         ("mulps","maddwd"),("addps","maddwd"),("addps","fmadd"),("psrad","permilps"),("pslld","psrad"),("psrad","paddd"),
         ("bcastss_m","fmadd"),("bcastss_m","maddwd"),("bcastss_m","permilps"),("pmovsxbw","maddwd"),("pshufb","maddwd"),("pshufb","permilps"),
         ("dpbusd","maddwd"),("dpbusd","cvtdq2ps"),("dpbusd","permilps")]
# the current per-pair mix: sign, maddubs, maddwd, cvt, permil, fma
mixes = {
 "pair_current": ["signb","maddubsw","maddwd","cvtdq2ps","permilps","fmadd"],
 "pair_shift":   ["signb","maddubsw","psrad","pslld","psrad","paddd","cvtdq2ps","permilps","fmadd"],
 "pair_bcast":   ["signb","maddubsw","maddwd","cvtdq2ps","bcastss_m","fmadd"],
 "pair_shiftb":  ["signb","maddubsw","psrad","pslld","psrad","paddd","cvtdq2ps","bcastss_m","fmadd"],
 "pair_wd2":     ["maddwd","maddwd","paddd","cvtdq2ps","permilps","fmadd"],
 "pair_wd2b":    ["maddwd","maddwd","paddd","cvtdq2ps","bcastss_m","fmadd"],
 "pair_vnni":    ["dpbusd","cvtdq2ps","permilps","fmadd"],
 "lanes_grp":    ["signb","maddubsw","maddwd","paddd"],
 "lanes_grp_sh": ["signb","maddubsw","psrad","pslld","psrad","paddd","paddd"],
}
out = [".text"]
fns = []
def emit(name, lines, chain=False):
    fns.append(name)
    out.append(f".globl b_{name}\n.type b_{name},@function\nb_{name}:")
    out.append("  vpxor %ymm0,%ymm0,%ymm0\n" + "\n".join(f"  vmovdqa %ymm0,%ymm{i}" for i in range(1,16)))
    out.append("1:")
    out.extend("  " + l for l in lines)
    out.append("  dec %rdi\n  jnz 1b\n  vzeroupper\n  ret")
for n in singles: emit(n, body([n], 6))
for a, b in pairs: emit(a + "__" + b, body([a, b], 6))
for m, l in mixes.items(): emit("mix_" + m, body(l, 4))
emit("calib", ["add %rcx, %rax"] * 24)
emit("lat_paddd", ["vpaddd %ymm0, %ymm0, %ymm0"] * 24)
emit("lat_fma", ["vfmadd231ps %ymm12, %ymm13, %ymm0"] * 24)
open("ports.S", "w").write("\n".join(out) + "\n")
# counts per iteration
counts = {}
for n in singles: counts[n] = 6
for a, b in pairs: counts[a + "__" + b] = 6
for m, l in mixes.items(): counts["mix_" + m] = 4
counts["calib"] = 24
counts["lat_paddd"] = 24
counts["lat_fma"] = 24
with open("fns.h", "w") as f:
    for n in fns: f.write(f'extern "C" void b_{n}(unsigned long, const void*);\n')
    f.write("struct F { const char* name; void (*fn)(unsigned long, const void*); int reps; };\nstatic F fns[] = {\n")
    for n in fns: f.write(f'  {{"{n}", b_{n}, {counts[n]}}},\n')
    f.write("};\n")
'''

MAIN = r'''
// Port-pressure microbenchmark: cycles per repetition of each pattern (core cycles from a
// latency-1 vpaddd chain), best of 7.
#include <x86intrin.h>
#include <cstdio>
#include <cstring>
#include "fns.h"
int main(int argc, char** argv) {
  alignas(64) static float buf[64] = {1.0f};
  const unsigned long iters = 2000000;
  auto time = [&](F& f) {
    unsigned long best = ~0ul;
    for (int t = 0; t < 7; ++t) {
      unsigned long t0 = __rdtsc();
      f.fn(iters, buf);
      unsigned long t1 = __rdtsc();
      if (t1 - t0 < best) best = t1 - t0;
    }
    return double(best);
  };
  double calib = 0;
  for (F& f : fns) if (!strcmp(f.name, "calib")) calib = time(f) / (iters * 24.0);  // tsc ticks per core cycle
  printf("tsc ticks per core cycle: %.3f\n", calib);
  for (F& f : fns) {
    if (argc > 1 && !strstr(f.name, argv[1])) continue;
    double cyc = time(f) / calib / (double(iters) * f.reps);
    printf("%-24s %.3f cycles per rep\n", f.name, cyc);
  }
}
'''


def main():
    with tempfile.TemporaryDirectory() as d:
        cwd = os.getcwd()
        os.chdir(d)
        exec(compile(GEN, "gen", "exec"), {})
        open("main.cpp", "w").write(MAIN)
        subprocess.run(["g++", "-O2", "main.cpp", "ports.S", "-o", "ports", "-Wl,-z,noexecstack"], check=True)
        os.chdir(cwd)
        subprocess.run([os.path.join(d, "ports")] + sys.argv[1:], check=True)


if __name__ == "__main__":
    main()
