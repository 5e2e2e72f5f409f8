// Golden cases recorded from Mesa's rocket driver (shared/rocket-golden):
// loading a case.json, regenerating its host data from the recorded PRNG
// recipe, rebuilding it with Opal's builder ("replay"), and the integer
// reference of its output.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/rocket/driver/emulator/npu_emulator.h"
#include "backends/rocket/lower/compiled_conv.h"

namespace opal::rocket {

struct GoldenCase {
  std::string name;
  std::string kind;  // "gemm" or "conv"
  std::string dir;   // folder holding case.json and the .bin files
  ConvOp op;         // as Mesa lowered it
  unsigned gemm_m = 0, gemm_k = 0, gemm_n = 0;
  std::vector<uint8_t> host_input;    // uint8 [dims1][dims2][C_in]
  std::vector<uint8_t> host_weights;  // uint8 [C_out][dims1][dims2][C_in]
  std::vector<int32_t> host_bias;     // int32 [C_out]
  nlohmann::json json;
};

// xorshift32 as the golden README defines it (state advances before each draw).
std::vector<uint32_t> xorshift32_draws(uint32_t seed, size_t count);

// Loads case.json and regenerates the host data; throws opal::Error if the
// regenerated data's sha256 differs from the recorded one.
GoldenCase load_golden_case(const std::string& case_json_path);

struct ReplayResult {
  CompiledConv compiled;
  std::vector<BoPlacement> bos;
  RegcmdBuffer regcmd;
  std::vector<uint8_t> packed_input;  // written part of the input BO
  std::vector<abi::JobDesc> jobs;
};

// Builds the case with Opal's builder, buffers placed in Mesa's creation order
// from `iova_base` (0x10000000 reproduces the golden fake addresses).
ReplayResult replay_case(const GoldenCase& c, Policy policy, uint32_t iova_base);

// Writes regcmd.bin, weights.bin, biases.bin, input.bin in the golden formats.
void write_replay_files(const ReplayResult& r, const std::string& dir);

struct EmulatedRun {
  ReplayResult replay;
  std::vector<uint8_t> output_bo;  // the whole output BO after the run
  std::vector<TaskSummary> tasks;
  std::vector<std::string> warnings;
};
// Replays the case and runs its jobs on the emulator driver.
EmulatedRun run_case_on_emulator(const GoldenCase& c, Policy policy, const EmulatorOptions& options);

// Integer reference computed directly from the host data, in the NPU's output
// layout (int8, byte[((n/16)*rows + row)*cols + col)*16 + n%16]) for the real
// channels; bytes of padding channels are left 0. `rows` may exceed the op's
// height (Opal's padded GEMM rows are not compared).
struct ReferenceOutput {
  std::vector<int32_t> accumulators;  // [row][col][n] = sum + bias, int32
  std::vector<int8_t> output;         // [row][col][n] after OUT_CVT
  unsigned rows = 0, cols = 0, channels = 0;
};
ReferenceOutput reference_output(const GoldenCase& c, Rounding rounding);

}  // namespace opal::rocket
