// The NPU performance model: the tasks the emulator executes for a GEMM cost
// exactly what the analytic tiling predicts; MAC cycles and DDR bytes follow
// from the shapes; the int8 fork's schedule (weights reloaded per 16 rows)
// moves more bytes than Opal's.
#include <gtest/gtest.h>

#include <random>

#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "backends/rocket/host/npu_gemm.h"
#include "backends/rocket/perf/perf_model.h"
#include "core/error.h"

namespace opal::rocket {
namespace {

CoreWork work_of(const std::vector<TaskSummary>& tasks) {
  CoreWork w;
  unsigned job = ~0u;
  for (const TaskSummary& t : tasks) {
    if (t.job != job) {
      w.jobs.emplace_back();
      job = t.job;
    }
    w.jobs.back().push_back(t);
  }
  return w;
}

TEST(RocketPerfModel, EmulatedTasksCostWhatTheTilingPredicts) {
  for (Precision precision : {Precision::W8A8, Precision::W16A16})
    for (unsigned cores : {1u, 3u}) {
      SCOPED_TRACE(testing::Message() << precision_name(precision) << " cores " << cores);
      const unsigned m = 36, k = 2048, n = 384;
      std::vector<std::unique_ptr<EmulatorDriver>> drivers;
      std::vector<Driver*> ptrs;
      for (unsigned i = 0; i < cores; ++i) {
        drivers.push_back(std::make_unique<EmulatorDriver>());
        ptrs.push_back(drivers.back().get());
      }
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> u(-1, 1);
      const QuantizedMatrix q = quantize_matrix(n, k, make_scheme(k, false, 0, precision), [&](unsigned, float* d) {
        for (unsigned i = 0; i < k; ++i) d[i] = u(rng);
      });
      NpuWeights w(ptrs, q);
      ScratchPool scratch;
      NpuGemm gemm(w, m, scratch, 1.0);
      std::vector<float> x(size_t(m) * k, 0.5f), y(size_t(m) * n);
      gemm.run(x.data(), k, y.data(), n);

      PerfParams p;
      p.cores = cores;
      p.precision = precision;
      std::vector<CoreWork> emulated;
      for (auto& d : drivers) emulated.push_back(work_of(d->emulator().tasks()));
      const Prediction from_emulator = predict_work(emulated, 0, p);
      const Prediction analytic = predict_gemm(m, k, n, p);
      EXPECT_EQ(from_emulator.tasks, analytic.tasks);
      EXPECT_EQ(from_emulator.tasks, gemm.last_run().tasks);
      EXPECT_EQ(from_emulator.jobs, analytic.jobs);
      EXPECT_EQ(from_emulator.mac_cycles, analytic.mac_cycles);
      EXPECT_EQ(from_emulator.ddr_bytes, analytic.ddr_bytes);
      EXPECT_DOUBLE_EQ(from_emulator.npu_seconds, analytic.npu_seconds);
      EXPECT_GT(analytic.host_seconds, 0.0);
    }
}

TEST(RocketPerfModel, CyclesAndBytesFollowFromTheShape) {
  PerfParams p;
  p.cores = 3;
  p.ddr_bytes_per_s = 1e15;  // compute-bound
  p.task_overhead_s = p.job_overhead_s = 0;
  p.mac_efficiency = 1.0;
  p.precision = Precision::W8A8;
  const unsigned m = 512, k = 4096, n = 4096;
  const Prediction r = predict_gemm(m, k, n, p);
  // 1024 MACs per cycle: M * K/32 * N/32 cycles in total, spread over 3 cores.
  EXPECT_EQ(r.mac_cycles, uint64_t(m) * (k / 32) * (n / 32));
  const double ideal = double(m) * k * n / 1024.0 / 1e9 / 3;
  EXPECT_GE(r.npu_seconds, ideal * 0.999);
  EXPECT_LE(r.npu_seconds, ideal * 1.2);  // N split 1376/1376/1344: the largest share sets the time
  // Every byte at least once: weights, activations (per core), int32 outputs.
  EXPECT_GE(r.ddr_bytes, uint64_t(k) * n + uint64_t(m) * k + uint64_t(m) * n * 4);
  // Half the clock, twice the time.
  PerfParams slow = p;
  slow.clock_hz = p.clock_hz / 2;
  EXPECT_NEAR(predict_gemm(m, k, n, slow).npu_seconds, 2 * r.npu_seconds, 1e-9);
  // Bandwidth-bound: time = bytes / bandwidth.
  PerfParams ddr = p;
  ddr.ddr_bytes_per_s = 1e9;
  const Prediction b = predict_gemm(m, k, n, ddr);
  EXPECT_NEAR(b.npu_seconds, double(b.ddr_bytes) / 1e9, 1e-9);
  // Two int8 planes per operand: three int8 GEMMs (hi x hi, hi x lo, lo x hi).
  PerfParams wide = p;
  wide.precision = Precision::W16A16;
  EXPECT_EQ(predict_gemm(m, k, n, wide).mac_cycles, 3 * r.mac_cycles);
  wide.precision = Precision::W8A16;
  EXPECT_EQ(predict_gemm(m, k, n, wide).mac_cycles, 2 * r.mac_cycles);
}

TEST(RocketPerfModel, ForkScheduleReloadsWeights) {
  PerfParams p;
  const Prediction opal = predict_gemm(512, 2048, 2048, p);
  p.schedule = "fork";
  const Prediction fork = predict_gemm(512, 2048, 2048, p);
  // 512 / 16 = 32 row tiles, each reading the whole 4 MiB of weights.
  EXPECT_GE(fork.ddr_bytes, uint64_t(32) * 2048 * 2048);
  EXPECT_GT(fork.seconds, opal.seconds);
  p.schedule = "gpu";
  EXPECT_THROW(predict_gemm(16, 32, 32, p), Error);
}

TEST(RocketPerfModel, PresetsCoverEveryMatmulOfALayer) {
  for (const ModelPreset& m : model_presets()) {
    const auto shapes = preset_shapes(m);
    ASSERT_EQ(shapes.size(), 7u) << m.name;
    uint64_t params = 0;
    for (const MatmulShape& s : shapes) params += uint64_t(s.k) * s.n * s.count;
    EXPECT_GT(params, 100'000'000u) << m.name;  // every preset is a >= 0.5B model without embeddings
    const ModelPrediction pr = predict_prefill(shapes, 128, PerfParams{});
    EXPECT_GT(pr.tokens_per_s, 0.0);
  }
}

}  // namespace
}  // namespace opal::rocket
