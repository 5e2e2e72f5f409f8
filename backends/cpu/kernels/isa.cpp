// Host feature detection (CPUID/xgetbv on x86, getauxval(AT_HWCAP) on aarch64)
// and the process-wide ISA selection.
#include "backends/cpu/kernels/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace opal::cpu {
namespace {

struct HostFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C, OS saves ymm
  bool avx512 = false;  // F, BW, VL, DQ, OS saves zmm and opmask
  bool avx512_vnni = false;
  bool avx_vnni = false;  // AVX-VNNI (VEX vpdpbusd on ymm), with avx2
  bool avx512_bf16 = false;
  bool amd = false;  // vendor "AuthenticAMD" (or Hygon's "HygonGenuine", Zen based)
  bool neon = false;
  bool dotprod = false;
};

HostFeatures detect() {
  HostFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.amd = std::string_view(vendor) == "AuthenticAMD" || std::string_view(vendor) == "HygonGenuine";
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_saved = (xcr0_lo & 0x6) == 0x6;
  const bool zmm_saved = (xcr0_lo & 0xe6) == 0xe6;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), vnni = c & (1u << 11);
  f.avx2 = ymm_saved && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_saved && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && vnni;
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  f.avx512_bf16 = f.avx512 && (a1 & (1u << 5));
  f.avx_vnni = f.avx2 && (a1 & (1u << 4));
#elif defined(__aarch64__)
  const unsigned long hw = getauxval(AT_HWCAP);
  f.neon = hw & (1ul << 1);      // HWCAP_ASIMD
  f.dotprod = hw & (1ul << 20);  // HWCAP_ASIMDDP
#endif
  return f;
}

const HostFeatures& host() {
  static const HostFeatures f = detect();
  return f;
}

// The default: $OPAL_ISA when it names an ISA the host has, else the best.
int initial_isa() {
  if (const char* env = std::getenv("OPAL_ISA")) {
    for (Isa i : supported_isas())
      if (std::string_view(env) == isa_name(i)) return int(i);
  }
  return int(best_isa());
}

std::atomic<int>& selection() {
  static std::atomic<int> s{initial_isa()};
  return s;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx2_vnni: return "avx2-vnni";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx2_vnni, Isa::avx512, Isa::neon})
    if (name == isa_name(i)) return i;
  if (name == "ref") return Isa::scalar;
  fail("unknown ISA '{}' (choose scalar, avx2, avx2-vnni, avx512 or neon)", name);
}

bool host_supports(Isa isa) {
  switch (isa) {
    case Isa::scalar: return true;
#if defined(__x86_64__) || defined(__i386__)
    case Isa::avx2: return host().avx2;
    case Isa::avx2_vnni: return host().avx_vnni;
    case Isa::avx512: return host().avx512_vnni;  // the AVX-512 kernels use VNNI
#else
    case Isa::avx2:
    case Isa::avx2_vnni:
    case Isa::avx512: return false;
#endif
#if defined(__aarch64__)
    case Isa::neon: return host().neon && host().dotprod;  // the NEON kernels use sdot
#else
    case Isa::neon: return false;
#endif
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx2_vnni, Isa::avx512, Isa::neon})
    if (host_supports(i)) v.push_back(i);
  return v;
}

Isa best_isa() { return supported_isas().back(); }

bool host_has_avx512() { return host().avx512; }
bool host_has_avx512_vnni() { return host().avx512_vnni; }
bool host_has_avx_vnni() { return host().avx_vnni; }
bool host_has_avx512_bf16() { return host().avx512_bf16; }
bool host_is_amd() { return host().amd; }
bool host_has_neon_dotprod() { return host().dotprod; }

void set_isa(Isa isa) {
  if (!host_supports(isa)) {
    std::string have;
    for (Isa i : supported_isas()) have += std::string(have.empty() ? "" : ", ") + isa_name(i);
    fail("--isa {}: this CPU (or build) does not support it; available: {}", isa_name(isa), have);
  }
  selection().store(int(isa));
}

Isa selected_isa() { return Isa(selection().load(std::memory_order_relaxed)); }

std::string isa_description() {
  const Isa isa = selected_isa();
  std::string s = isa_name(isa);
  if (isa == Isa::avx512) s += host().avx512_bf16 ? " (vnni, bf16)" : " (vnni)";
  if (isa == Isa::neon && host().dotprod) s += " (dotprod)";
  return s;
}

}  // namespace opal::cpu
