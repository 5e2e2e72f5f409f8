// Shared helpers of the rocket tests: golden case list and file loading.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/rocket/replay/golden_case.h"

namespace opal::rocket::test {

inline const std::vector<std::string>& golden_case_names() {
  static const std::vector<std::string> names = {
      "conv1x1_14x14x512_to_512", "conv1x1_28x28x256_to_256", "conv3x3_56x56x128_to_128_same",
      "gemm_M128_K1024_N1024",    "gemm_M16_K4096_N4096",     "gemm_M1_K2048_N2048",
      "gemm_M256_K8192_N256",     "gemm_M32_K256_N256",       "gemm_M32_K64_N64",
      "gemm_M512_K2048_N512",     "gemm_M64_K512_N128"};
  return names;
}

// Loads shared/rocket-golden/<name>/case.json (fails the test if absent).
GoldenCase load_case(const std::string& name);
// Reads a golden file; returns false if it does not exist.
bool read_golden_file(const GoldenCase& c, const std::string& file, std::vector<uint8_t>& out);

}  // namespace opal::rocket::test
