// The CPU ISAs a test "over every host ISA" covers, announced loudly. The first
// call prints a banner on stderr naming the ISAs covered and those this host's
// architecture has but the host lacks (not covered here: the test passes
// without them). $OPAL_REQUIRE_ISA (comma-separated, e.g. "avx512" on a CI
// machine meant to have it) turns a missing ISA into a failure: on_missing is
// called with a message for each, on every call. Header-only and free of
// GoogleTest, so that tests/kernels_arm's qemu check program uses it too.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "core/error.h"

namespace opal::test {

// The ISAs of this build's architecture other than scalar.
inline std::vector<cpu::Isa> architecture_isas() {
#if defined(__x86_64__) || defined(__i386__)
  return {cpu::Isa::avx2, cpu::Isa::avx2_vnni, cpu::Isa::avx512};
#elif defined(__aarch64__)
  return {cpu::Isa::neon};
#else
  return {};
#endif
}

inline std::string isa_list(const std::vector<cpu::Isa>& isas) {
  std::string s;
  for (cpu::Isa i : isas) s += std::string(s.empty() ? "" : " ") + cpu::isa_name(i);
  return s.empty() ? "none" : s;
}

// Prints the banner, once per process.
inline void announce_isa_coverage() {
  static const bool announced = [] {
    std::vector<cpu::Isa> lacking;
    for (cpu::Isa i : architecture_isas())
      if (!cpu::host_supports(i)) lacking.push_back(i);
    std::fprintf(stderr, "[ ISA      ] covered on this host: %s\n", isa_list(cpu::supported_isas()).c_str());
    if (!lacking.empty())
      std::fprintf(stderr,
                   "[ ISA      ] *** NOT COVERED: %s (this host lacks it; the kernels for it are not tested here;"
                   " OPAL_REQUIRE_ISA=%s makes this a failure) ***\n",
                   isa_list(lacking).c_str(), cpu::isa_name(lacking.front()));
    return true;
  }();
  (void)announced;
}

// Every ISA the host supports (scalar first, unless with_scalar is false).
template <class OnMissing>
std::vector<cpu::Isa> covered_isas(OnMissing on_missing, bool with_scalar = true) {
  announce_isa_coverage();
  if (const char* req = std::getenv("OPAL_REQUIRE_ISA")) {
    std::string names = req;
    for (size_t pos = 0; pos <= names.size();) {
      const size_t comma = std::min(names.find(',', pos), names.size());
      const std::string name = names.substr(pos, comma - pos);
      pos = comma + 1;
      if (name.empty()) continue;
      try {
        if (!cpu::host_supports(cpu::parse_isa(name)))
          on_missing("OPAL_REQUIRE_ISA names " + name + ", which this host lacks: the test cannot cover it here");
      } catch (const Error& e) {
        on_missing(std::string("OPAL_REQUIRE_ISA: ") + e.what());
      }
    }
  }
  std::vector<cpu::Isa> out;
  for (cpu::Isa i : cpu::supported_isas())
    if (with_scalar || i != cpu::Isa::scalar) out.push_back(i);
  return out;
}

}  // namespace opal::test
