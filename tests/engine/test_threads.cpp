// The thread count never changes a result (docs/architecture.md, the
// executor): MUL_MAT at decode-sized batches, cut by weight bytes into more
// chunks than the pool's size() (ops/matmul.cpp), and at a prompt-sized batch,
// on the GGUF layout and on the load-time row groups, gives the one-thread
// bits at 2, 3 and 4 threads under every ISA the host runs; so do whole
// models' logits (a prompt and decode steps). Plus the chunking's own rules
// and the CPU device's counters of jobs and MUL_MAT groups.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/ops/ops.h"
#include "backends/factory/backend_factory.h"
#include "core/quant.h"
#include "graph/registry.h"
#include "graph/scheduler.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/isa_coverage.h"
#include "support/test_support.h"

namespace opal {
namespace {

// One MUL_MAT of weight `wq` (n rows of k, type t, in `layout`) by T rows of x on `threads` threads.
std::vector<float> threads_mul_mat(DType t, uint8_t layout, const std::vector<uint8_t>& wq, int64_t k, int64_t n,
                                   const std::vector<float>& x, int64_t T, int threads) {
  auto reg = make_registry({}, threads);
  auto g = std::make_unique<Graph>();
  Tensor* w = g->new_leaf("w", t, {k, n, 1, 1}, TensorRole::Input);
  Tensor* xi = g->new_leaf("x", DType::F32, {k, T, 1, 1}, TensorRole::Input);
  w->layout = layout;  // before scheduling: the plan sizes its scratch by it
  Tensor* y = g->mul_mat(w, xi);
  g->mark_output(y);
  auto sg = Scheduler(*reg).schedule(std::move(g));
  std::memcpy(w->data, wq.data(), wq.size());
  if (layout != cpu::kLayoutPlain) cpu::repack_matrix(layout, t, static_cast<uint8_t*>(w->data), k, n);
  std::memcpy(xi->data, x.data(), x.size() * sizeof(float));
  sg->run();
  return std::vector<float>(y->ptr<float>(), y->ptr<float>() + n * T);
}

TEST(Threads, MatmulSameBitsAtAnyThreadCountOnEveryIsa) {
  const cpu::Isa before = cpu::selected_isa();
  // Q8_0: 17416 rows of 512, 9 MiB, more chunks by bytes than size() at 2 threads (8); the others
  // 4104 rows, size() chunks of 16-row units at 2, 3 and 4 threads (8, 12, 16). 8 rows past a unit:
  // a last partial unit and group. The SIMD ISAs only (the reference's chunks split the same way).
  const int64_t k = 512;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n = t == DType::Q8_0 ? 17408 + 8 : 4096 + 8;
    std::vector<float> wf(size_t(k * n));
    for (float& v : wf) v = d(rng);
    std::vector<uint8_t> wq(row_bytes(t, k) * size_t(n));
    quantize_rows(t, wf.data(), wq.data(), n, k);
    for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
      cpu::set_isa(isa);
      const cpu::MatmulKernels* kern = cpu::matmul_kernels(t);
      ASSERT_NE(kern, nullptr);
      std::vector<uint8_t> layouts = {cpu::kLayoutPlain};
      if (kern->packed_layout != cpu::kLayoutPlain) layouts.push_back(kern->packed_layout);
      for (uint8_t layout : layouts)
        for (int64_t T : {1, 3, 8, 9}) {  // decode-sized (by bytes) and a batch (size() chunks)
          std::vector<float> x(size_t(k * T));
          for (float& v : x) v = d(rng);
          const std::vector<float> one = threads_mul_mat(t, layout, wq, k, n, x, T, 1);
          for (int threads : {2, 3, 4}) {
            const std::vector<float> many = threads_mul_mat(t, layout, wq, k, n, x, T, threads);
            ASSERT_EQ(one.size(), many.size());
            EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
                << dtype_name(t) << " layout " << int(layout) << " T " << T << " threads " << threads << " under "
                << cpu::isa_name(isa);
          }
        }
    }
  }
  cpu::set_isa(before);
}

std::vector<float> threads_model_logits(const std::string& path, int threads) {
  auto reg = make_registry({}, threads);
  auto model = Model::load(path, *reg, LoadOptions{});
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  const int64_t nv = ctx.n_vocab();
  std::vector<float> all;
  Batch b;
  const std::vector<int32_t> prompt = {1, 5, 9, 17, 33, 2, 7, 11, 3, 8, 21, 4};
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), 0, i + 1 == prompt.size());
  ctx.decode(b);
  all.insert(all.end(), ctx.logits(0), ctx.logits(0) + nv);
  for (int32_t i = 0; i < 3; ++i) {
    b.clear();
    b.add(int32_t(4 + 3 * i), int32_t(prompt.size()) + i, 0, true);
    ctx.decode(b);
    all.insert(all.end(), ctx.logits(0), ctx.logits(0) + nv);
  }
  return all;
}

TEST(Threads, ModelLogitsSameBitsAtAnyThreadCountOnEveryIsa) {
  const cpu::Isa before = cpu::selected_isa();
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }))
    for (const char* stem : {"tiny-llama-q8_0", "tiny-qwen3-q4_k_m", "tiny-gemma3-q4_0"}) {
      cpu::set_isa(isa);
      const std::string path = test::golden_model(stem);
      const std::vector<float> one = threads_model_logits(path, 1);
      for (int threads : {2, 3}) {
        const std::vector<float> many = threads_model_logits(path, threads);
        ASSERT_EQ(one.size(), many.size());
        EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
            << stem << " at " << threads << " threads under " << cpu::isa_name(isa);
      }
    }
  cpu::set_isa(before);
}

// A decode step at two threads runs each layer's q/k/v and gate/up as one job
// each (the CPU device's counters), fewer jobs than matmuls; one thread runs
// no job on the pool and no group.
TEST(Threads, DecodeRunsTheMatmulsOfOneInputAsOneJob) {
  for (int threads : {1, 2}) {
    auto reg = make_registry({}, threads);
    auto model = Model::load(test::golden_model("tiny-qwen3-q8_0"), *reg, LoadOptions{});
    const int64_t n_layer = model->hparams().n_layer;
    ContextParams cp;
    cp.n_ctx = 16;
    Context ctx(*model, cp);
    Batch b;
    b.add(1, 0, 0, true);
    ctx.decode(b);  // the first decode compiles the plan
    const DeviceStats before = reg->host().stats();
    b.clear();
    b.add(5, 1, 0, true);
    ctx.decode(b);
    const DeviceStats after = reg->host().stats();
    auto delta = [&](const char* name) { return after.get(name) - before.get(name); };
    if (threads == 1) {
      EXPECT_EQ(delta("pool_jobs"), 0);
      EXPECT_EQ(delta("mul_mat_groups"), 0);
      continue;
    }
    EXPECT_EQ(delta("mul_mat_groups"), double(2 * n_layer)) << "q/k/v and gate/up of every layer";
    EXPECT_EQ(delta("grouped_nodes"), double(5 * n_layer));
    // Per layer: the q/k/v job, attention, the output projection, the gate/up job, down; then the output matrix.
    EXPECT_GT(delta("pool_jobs"), 0);
    EXPECT_LE(delta("pool_jobs"), double(5 * n_layer + 1));
  }
}

// At two threads a decode step posts the next MUL_MAT's weights to the idle
// workers (at least one range a layer; one thread has no workers and posts
// none), and the executor's run time and the pool's chunk time are counted.
// (Whether a worker gets to prefetch or claim chunks depends on the host's
// load, so only the posts and the sum of both slots' chunk time are asserted.)
TEST(Threads, DecodeWorkersPrefetchTheNextWeights) {
  for (int threads : {1, 2}) {
    auto reg = make_registry({}, threads);
    auto model = Model::load(test::golden_model("tiny-qwen3-q8_0"), *reg, LoadOptions{});
    ContextParams cp;
    cp.n_ctx = 16;
    Context ctx(*model, cp);
    Batch b;
    b.add(1, 0, 0, true);
    ctx.decode(b);
    const DeviceStats before = reg->host().stats();
    for (int32_t pos = 1; pos < 6; ++pos) {
      b.clear();
      b.add(5 + pos, pos, 0, true);
      ctx.decode(b);
    }
    const DeviceStats after = reg->host().stats();
    auto delta = [&](const char* name) { return after.get(name) - before.get(name); };
    EXPECT_GT(delta("run_us"), 0.0);
    if (threads == 1) {  // no jobs on the pool: nothing counted, nothing posted or prefetched
      EXPECT_EQ(delta("busy_us_0"), 0.0);
      EXPECT_EQ(delta("prefetch_posts"), 0.0);
      EXPECT_EQ(delta("prefetched_bytes"), 0.0);
      continue;
    }
    EXPECT_GT(delta("busy_us_0") + delta("busy_us_1"), 0.0);
    EXPECT_LE(delta("busy_us_0"), delta("run_us"));
    EXPECT_GE(delta("prefetch_posts"), 5.0 * double(model->hparams().n_layer));
  }
}

// RMS_NORM runs several rows' sums side by side (ops/norm.cpp); each row
// keeps ggml's order: sum of float squares in double, element by element.
// The same bits as that row-at-a-time formula for 1-13 rows (whole groups of
// rows and a rest) at 1 and 3 threads.
TEST(Threads, RmsNormRowsSideBySideKeepEachRowsBits) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int threads : {1, 3})
    for (int64_t rows : {1, 4, 5, 13})
      for (int64_t n : {int64_t(128), int64_t(1000)}) {
        auto reg = make_registry({}, threads);
        auto g = std::make_unique<Graph>();
        Tensor* x = g->new_leaf("x", DType::F32, {n, rows, 1, 1}, TensorRole::Input);
        Tensor* y = g->rms_norm(x, 1e-6f);
        g->mark_output(y);
        auto sg = Scheduler(*reg).schedule(std::move(g));
        for (int64_t i = 0; i < n * rows; ++i) x->ptr<float>()[i] = d(rng) * float(1 + i % 7);
        sg->run();
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = x->ptr<float>() + r * n;
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += double(xr[i] * xr[i]);
          const float s = 1.0f / std::sqrt(float(sum / double(n)) + 1e-6f);
          for (int64_t i = 0; i < n; ++i) {
            const float want = xr[i] * s;
            ASSERT_EQ(std::memcmp(&want, y->ptr<float>() + r * n + i, 4), 0)
                << rows << " rows of " << n << ", row " << r << " element " << i << ", " << threads << " threads";
          }
        }
      }
}

TEST(Threads, MatmulChunksByWeightBytes) {
  // One thread: one chunk. Batches over 8 rows: the pool's size().
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(1) << 30, 100000, 1, 1, 1), 1);
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(1) << 30, 100000, 9, 2, 8), 8);
  // Decode: at least size(), about 1 MiB a chunk, at most 32 a thread, at most one 16-row unit a chunk.
  EXPECT_EQ(cpu::mul_mat_chunks(1 << 20, 1024, 1, 2, 8), 8);
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(20) << 20, 20000, 1, 2, 8), 20);
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(166) << 20, 151936, 1, 2, 8), 64);
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(166) << 20, 151936, 8, 3, 12), 96);
  EXPECT_EQ(cpu::mul_mat_chunks(uint64_t(64) << 20, 40, 1, 2, 8), 3);  // 40 rows: three units
  // The chunks' rows: whole 16-row units in order, covering every row, units spread within one.
  for (int64_t rows : {1, 15, 16, 40, 1024, 151936})
    for (int nc : {1, 3, 8, 64}) {
      int64_t prev = 0, lo = rows, hi = 0;
      for (int c = 0; c < nc; ++c) {
        int64_t r0, r1;
        cpu::mul_mat_chunk_rows(rows, c, nc, &r0, &r1);
        EXPECT_EQ(r0, prev) << rows << " rows, chunk " << c << " of " << nc;
        EXPECT_LE(r0, r1);
        if (r1 < rows) {
          EXPECT_EQ(r1 % 16, 0);
          lo = std::min(lo, r1 - r0);
          hi = std::max(hi, r1 - r0);
        }
        prev = r1;
      }
      EXPECT_EQ(prev, rows);
      if (hi > 0) {
        EXPECT_LE(hi - lo, 16) << rows << " rows in " << nc;
      }
    }
}

}  // namespace
}  // namespace opal
