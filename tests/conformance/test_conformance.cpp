// Conformance in test mode: every case of the CI set on the CPU (each ISA the
// host supports) and on the test accelerator against the scalar reference;
// and the runner's own sanity (it can fail, it reports unsupported cases).
#include <gtest/gtest.h>

#include "backends/factory/conformance.h"
#include "core/error.h"
#include "support/test_support.h"

namespace opal {
namespace {

TEST(Conformance, CiCasesCoverEveryOpAndRealisticShapes) {
  const std::vector<OpCase> cases = conformance_cases("ci");
  std::set<Op> ops;
  bool m32 = false, odd_n = false, k4096 = false;
  for (const OpCase& c : cases) {
    ops.insert(c.op);
    m32 = m32 || (c.op == Op::MulMat && c.m == 32);
    odd_n = odd_n || (c.op == Op::MulMat && c.n % 32 != 0);
    k4096 = k4096 || c.k >= 4096;
  }
  EXPECT_EQ(ops.size(), computing_ops().size());
  EXPECT_TRUE(m32 && odd_n && k4096);
  const std::vector<OpCase> full = conformance_cases("full");
  int64_t max_m = 0, max_k = 0;
  for (const OpCase& c : full) max_m = std::max(max_m, c.m), max_k = std::max(max_k, c.k);
  EXPECT_EQ(max_m, 512);
  EXPECT_EQ(max_k, 8192);
  EXPECT_THROW(conformance_cases("nope"), Error);
}

void expect_green(const std::string& backend, const std::string& op = "") {
  ConformanceOptions o;
  o.backends = {backend};
  o.op = op;
  int pass = 0;
  for (const ConformanceResult& r : run_conformance(o)) {
    EXPECT_NE(r.status, ConformanceResult::Fail) << r.line();
    if (r.status == ConformanceResult::Skipped) {
      // only types the reference cannot quantize (or K not a whole number of blocks)
      EXPECT_TRUE(r.reason.find("quantizer") != std::string::npos || r.reason.find("blocks") != std::string::npos)
          << r.line();
    }
    pass += r.status == ConformanceResult::Pass;
  }
  EXPECT_GT(pass, 0);
}

TEST(Conformance, CpuEveryIsaMatchesTheScalarReference) { expect_green("cpu"); }

TEST(Conformance, TestAccelMatchesTheScalarReference) {
  ConformanceOptions o;
  o.backends = {"test-accel"};
  int pass = 0, unsupported = 0;
  for (const ConformanceResult& r : run_conformance(o)) {
    EXPECT_NE(r.status, ConformanceResult::Fail) << r.line();
    if (r.status == ConformanceResult::Pass) {
      ++pass;
      EXPECT_EQ(r.c.op, Op::MulMat) << r.line();
      EXPECT_TRUE(r.c.dtype == DType::Q8_0 || r.c.dtype == DType::F16) << r.line();
    }
    if (r.status == ConformanceResult::Unsupported) {
      ++unsupported;
      EXPECT_FALSE(r.reason.empty());
    }
  }
  EXPECT_EQ(pass, 3 * 2 + 3 * 1);  // M in {1, 7, 32} x (f16: K in {1000, 512}; q8_0: K = 512, 1000 is no whole block)
  EXPECT_GT(unsupported, 0);
}

TEST(Conformance, RocketRepresentativeMatmulsMatchTheScalarReference) {
  // CI runs the ci set (M = 32 is the rocket's smallest batch); the full
  // rocket shapes are `opal conformance --backend rocket --cases rocket`.
  ConformanceOptions o;
  o.backends = {"rocket"};
  o.op = "MUL_MAT";
  int pass = 0;
  for (const ConformanceResult& r : run_conformance(o)) {
    EXPECT_NE(r.status, ConformanceResult::Fail) << r.line();
    if (r.status == ConformanceResult::Pass) {
      ++pass;
      EXPECT_GE(r.c.m, 32) << r.line();
    }
    if (r.status == ConformanceResult::Unsupported) {
      EXPECT_FALSE(r.reason.empty());
    }
  }
  EXPECT_GE(pass, 5);  // f32, f16, bf16, q4_0, q8_0 at M = 32
}

TEST(Conformance, SupportModeRunsNothingAndAgreesWithTestMode) {
  ConformanceOptions o;
  o.backends = {"test-accel"};
  o.op = "MUL_MAT";
  o.mode = ConformanceMode::Support;
  int yes = 0;
  for (const ConformanceResult& r : run_conformance(o)) yes += r.status == ConformanceResult::Pass;
  EXPECT_GT(yes, 0);
}

TEST(Conformance, PerfModeReportsRates) {
  ConformanceOptions o;
  o.backends = {"cpu"};
  o.op = "MUL_MAT";
  o.dtype = "q8_0";
  o.mode = ConformanceMode::Perf;
  o.perf_reps = 1;
  int n = 0;
  for (const ConformanceResult& r : run_conformance(o)) {
    if (r.status != ConformanceResult::Pass) continue;
    ++n;
    EXPECT_GT(r.seconds, 0.0);
    EXPECT_GT(r.gflops, 0.0);
    EXPECT_GT(r.gbps, 0.0);
  }
  EXPECT_GT(n, 0);
}

TEST(Conformance, CliRunsAndTallies) {
  std::string out;
  ASSERT_EQ(test::run_command(test::opal_binary() + " conformance --backend test-accel --op MUL_MAT -q 2>&1", &out), 0)
      << out;
  EXPECT_NE(out.find("test-accel:"), std::string::npos) << out;
  EXPECT_NE(out.find("0 failed"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::opal_binary() + " conformance --op NOPE 2>&1", &out), 0);
  EXPECT_NE(out.find("unknown op"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
