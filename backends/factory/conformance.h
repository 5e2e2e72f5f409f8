// The conformance runner (the analogue of ggml's test-backend-ops): every
// backend x op x dtype x shape against the scalar reference, with realistic
// shapes and tolerances per op and dtype (backends/shadow/tolerance.h).
//
// For each case it builds the one-op graph twice from the same seed
// (op_cases.h): once on a CPU-only registry with the scalar reference kernels,
// once on a registry holding the backend under test, whose weights are
// uploaded to it when it accepts them. The node must be placed on the backend
// under test (else the case is "unsupported", with the scheduler's reason).
// The CPU is tested once per ISA the host supports (cpu_isas()).
//
// Modes: test (NMSE against the reference), perf (time, GFLOP/s and GB/s of
// the backend per case), support (what supports() says, nothing run).
// Case sets: "ci" (small, every op and dtype, shapes that are not multiples
// of the blocks), "full" (batch M in {1, 7, 32, 128, 512}, K up to 8192) and
// "rocket" (M in {32, 64, 128, 512}, K up to 12288, N up to 8192) and "et"
// (ET-SoC-1's ops and dtypes, M in {1, 7, 32}, K up to 8192: emulator-sized).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/factory/op_cases.h"

namespace opal {

enum class ConformanceMode { Test, Perf, Support };

struct ConformanceOptions {
  ConformanceMode mode = ConformanceMode::Test;
  std::vector<std::string> backends;  // factory names; empty = all
  std::string op;                     // "" = every op, else an op name ("MUL_MAT")
  std::string dtype;                  // "" = every dtype
  std::string cases = "ci";           // ci | full | rocket | et
  int threads = 1;
  uint32_t seed = 1234;
  int perf_reps = 5;
};

struct ConformanceResult {
  std::string backend;  // "cpu/avx2", "test-accel"
  OpCase c;
  enum Status { Pass, Fail, Unsupported, Skipped } status = Pass;
  std::string reason;  // for Fail / Unsupported / Skipped
  double nmse = 0, tolerance = 0, max_abs = 0;
  double seconds = 0, gflops = 0, gbps = 0;  // perf mode
  std::string line() const;                  // one human-readable line
};

// The ISAs of the CPU backend to test ("scalar" first, then each one the host
// supports).
std::vector<std::string> cpu_isas();

std::vector<OpCase> conformance_cases(const std::string& set);

// Runs every case; calls on_result after each. Throws opal::Error for bad
// options (unknown backend, op or case set).
std::vector<ConformanceResult> run_conformance(const ConformanceOptions& o,
                                               const std::function<void(const ConformanceResult&)>& on_result = {});

}  // namespace opal
