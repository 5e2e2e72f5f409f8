// CPU instruction-set selection for the matmul kernels.
//
// Each ISA's kernels live in their own folder (x86_avx2/, x86_avx512/,
// arm_neon/), compiled with that ISA's flags only, so one binary runs on any
// CPU of its architecture and dispatches at run time to what the CPU has.
// The process-wide selection defaults to the best ISA the host supports; it
// can be lowered (e.g. `--isa avx2`, or `scalar` for the reference kernels)
// before a model is loaded.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace opal::cpu {

// Names as users type them (`--isa avx512`). avx2_vnni ("avx2-vnni") is AVX2
// plus AVX-VNNI (the 256-bit VEX vpdpbusd; Alder Lake, Zen 4 and later): its
// own kernels for Q4_0 / Q8_0 prompt batches, the avx2 entries otherwise.
// `avx2` stays plain AVX2 on every host (what llama.cpp's haswell build runs).
enum class Isa { scalar, avx2, avx2_vnni, avx512, neon };

const char* isa_name(Isa isa);
// Parses a user's ISA name; throws opal::Error naming the valid choices.
Isa parse_isa(std::string_view name);
// Whether this build has kernels for the ISA and the CPU it runs on can execute them.
bool host_supports(Isa isa);
// Every ISA host_supports(), scalar first.
std::vector<Isa> supported_isas();
// The best ISA host_supports().
Isa best_isa();
// Features of the host beyond the ISA level that the kernels use ("vnni", "bf16", "dotprod").
bool host_has_avx512();  // F, BW, VL, DQ (whether or not this build's avx512 kernels can run)
bool host_has_avx512_vnni();
bool host_has_avx_vnni();
bool host_has_avx512_bf16();
bool host_is_amd();  // an x86 CPU from AMD (or Hygon)
bool host_has_neon_dotprod();

// The process-wide selection used by matmul_kernels(type), initially $OPAL_ISA
// if set to an ISA the host has, else best_isa(). set_isa throws
// opal::Error if the host lacks the ISA. Set it before loading a model.
void set_isa(Isa isa);
Isa selected_isa();
// A one-line description for logs, e.g. "avx512 (vnni, bf16)".
std::string isa_description();

}  // namespace opal::cpu
