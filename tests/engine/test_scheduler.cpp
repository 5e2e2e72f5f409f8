// Placement, segments, copies and fallback, end to end with the test
// accelerator (backends/test_accel), which runs only MUL_MAT on q8_0/f16
// weights in memory the CPU cannot read.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/factory/backend_factory.h"
#include "backends/test_accel/test_accel.h"
#include "core/error.h"
#include "golden_support.h"
#include "graph/registry.h"
#include "graph/scheduler.h"
#include "models/model.h"
#include "runtime/context.h"

namespace opal {
namespace {

std::unique_ptr<Registry> cpu_and_accel(TestAccelDevice** accel) {
  auto reg = make_registry({}, 1);
  *accel = static_cast<TestAccelDevice*>(&reg->add(std::make_unique<TestAccelDevice>()));
  return reg;
}

std::vector<float> prompt_logits(const Model& m, const std::vector<int32_t>& toks) {
  ContextParams cp;
  cp.n_ctx = 128;
  Context ctx(m, cp);
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], int32_t(i), 0, true);
  ctx.decode(b);
  std::vector<float> out;
  for (int64_t i = 0; i < ctx.n_outputs(); ++i) out.insert(out.end(), ctx.logits(i), ctx.logits(i) + ctx.n_vocab());
  // and one decode step, through the 1-token bucket
  b.clear();
  b.add(7, int32_t(toks.size()), 0, true);
  ctx.decode(b);
  out.insert(out.end(), ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  return out;
}

class AccelMatchesCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(AccelMatchesCpu, SameLogitsAsCpuOnly) {
  const std::string stem = GetParam();
  const test::Golden g = test::load_golden(stem);
  std::vector<int32_t> toks(g.prompt.begin(), g.prompt.begin() + 16);
  // The test accelerator computes as the scalar reference kernels do: compare against those.
  struct ScalarIsa {
    cpu::Isa before = cpu::selected_isa();
    ScalarIsa() { cpu::set_isa(cpu::Isa::scalar); }
    ~ScalarIsa() { cpu::set_isa(before); }
  } scalar_isa;
  auto cpu_reg = make_registry({}, 1);
  auto cpu_model = Model::load(test::golden_model_path(stem), *cpu_reg);
  const std::vector<float> want = prompt_logits(*cpu_model, toks);

  TestAccelDevice* accel = nullptr;
  auto reg = cpu_and_accel(&accel);
  auto model = Model::load(test::golden_model_path(stem), *reg);
  // weights: matmul weights on the accelerator, the embedding table (read by GET_ROWS) on the CPU
  EXPECT_EQ(model->weight_placement().at(model->weight("blk.0.attn_q.weight")).device, accel);
  EXPECT_EQ(model->weight_placement().at(model->weight("output.weight")).device, accel);
  const Placement& emb = model->weight_placement().at(model->weight("token_embd.weight"));
  EXPECT_EQ(emb.device->role(), DeviceRole::Host);
  EXPECT_NE(emb.reason.find("GET_ROWS"), std::string::npos) << emb.reason;
  EXPECT_GT(accel->buffers().bytes_uploaded(), 0u);

  const uint64_t before = accel->accel_executor().nodes_run();
  const std::vector<float> got = prompt_logits(*model, toks);
  EXPECT_GT(accel->accel_executor().nodes_run(), before);
  ASSERT_EQ(got.size(), want.size());
  double maxd = 0;
  for (size_t i = 0; i < got.size(); ++i) maxd = std::max(maxd, double(std::fabs(got[i] - want[i])));
  // Same arithmetic in the same order: identical up to nothing.
  EXPECT_LE(maxd, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Golden, AccelMatchesCpu, ::testing::Values("tiny-llama-q8_0", "tiny-llama-f16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(Scheduler, SegmentsCopiesAndReasons) {
  TestAccelDevice* accel = nullptr;
  auto reg = cpu_and_accel(&accel);
  auto model = Model::load(test::golden_model("tiny-llama-q8_0"), *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(*model, cp);
  ScheduledGraph& sg = ctx.bucket(4, 4);
  int on_accel = 0, fallbacks = 0;
  for (const Tensor* n : sg.graph().nodes()) {
    const Placement& p = sg.placement(n);
    if (n->op == Op::View) continue;  // views stay with their source and cost nothing
    if (p.device == accel) {
      ++on_accel;
      EXPECT_EQ(n->op, Op::MulMat);
    }
    if (n->op == Op::RmsNorm) {
      EXPECT_EQ(p.device->role(), DeviceRole::Host);
      EXPECT_NE(p.reason.find("test_accel runs only MUL_MAT"), std::string::npos) << p.reason;
      ++fallbacks;
    }
  }
  // 7 matmuls per layer x 2 layers + the lm head
  EXPECT_EQ(on_accel, 15);
  EXPECT_GT(fallbacks, 0);
  EXPECT_GT(sg.segments().size(), 2u);
  for (size_t i = 1; i < sg.segments().size(); ++i)
    EXPECT_NE(sg.segments()[i].device, sg.segments()[i - 1].device) << "adjacent segments must differ";
  // every accelerator segment gets its activations copied in; the CPU copies results back
  EXPECT_GT(sg.n_copies(), 0u);
  EXPECT_GT(sg.bytes_copied_per_run(), 0u);
  for (size_t i = 0; i < sg.segments().size(); ++i)
    if (sg.segments()[i].device == accel) {
      EXPECT_FALSE(sg.copies_before(i).empty());
    }
  EXPECT_GT(sg.compute_bytes().at("test_accel"), 0u);
}

TEST(Scheduler, UnsupportedWeightTypesFallBackToCpu) {
  TestAccelDevice* accel = nullptr;
  auto reg = cpu_and_accel(&accel);
  auto model = Model::load(test::golden_model("tiny-llama-q4_k_m"), *reg);
  const Placement& p = model->weight_placement().at(model->weight("blk.0.attn_q.weight"));
  EXPECT_EQ(p.device->role(), DeviceRole::Host);
  EXPECT_NE(p.reason.find("test_accel takes q8_0 and f16"), std::string::npos) << p.reason;
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  ScheduledGraph& sg = ctx.bucket(2, 2);
  EXPECT_EQ(sg.segments().size(), 1u);
  EXPECT_EQ(sg.n_copies(), 0u);
}

TEST(Scheduler, DecodeDoesNotReplanPerToken) {
  TestAccelDevice* accel = nullptr;
  auto reg = cpu_and_accel(&accel);
  auto model = Model::load(test::golden_model("tiny-llama-q8_0"), *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(*model, cp);
  Batch b;
  for (int i = 0; i < 5; ++i) b.add(10 + i, i, 0, i == 4);
  ctx.decode(b);
  b.clear();
  b.add(3, 5, 0, true);
  ctx.decode(b);  // builds the 1-token bucket
  const uint64_t plans = ScheduledGraph::plans_built();
  const uint64_t compiled = accel->accel_executor().plans_compiled();
  const size_t buckets = ctx.n_buckets();
  for (int i = 6; i < 20; ++i) {
    b.clear();
    b.add(3 + i, i, 0, true);
    ctx.decode(b);
  }
  EXPECT_EQ(ScheduledGraph::plans_built(), plans);
  EXPECT_EQ(accel->accel_executor().plans_compiled(), compiled);
  EXPECT_EQ(ctx.n_buckets(), buckets);
}

TEST(Scheduler, NoDeviceSupportsNodeIsAClearError) {
  Registry reg;  // an accelerator alone cannot run RMS_NORM, and there is no host
  reg.add(std::make_unique<CpuDevice>(1));
  Graph* g = new Graph();
  std::unique_ptr<Graph> owned(g);
  Tensor* x = g->new_leaf("x", DType::F32, {4, 1, 1, 1}, TensorRole::Input);
  Tensor* w = g->new_leaf("w", DType::F16, {4, 1, 1, 1}, TensorRole::Input);
  g->mark_output(g->mul(x, w));
  test::expect_error([&] { Scheduler(reg).schedule(std::move(owned)); }, {"not supported by any device", "'w' f16"});
}

}  // namespace
}  // namespace opal
