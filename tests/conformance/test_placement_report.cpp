// The per-model placement report (`opal ops -m MODEL`) on the golden tiny
// models with the test accelerator: counts and shares add up and the bytes
// copied are the scheduler's.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backends/factory/backend_factory.h"
#include "graph/perf/node_cost.h"
#include "graph/perf/placement_report.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

class PlacementReportOn : public ::testing::TestWithParam<std::string> {};

TEST_P(PlacementReportOn, NumbersAddUp) {
  auto reg = make_registry({"test-accel"}, 1);
  auto model = Model::load(test::golden_model(GetParam()), *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = cp.n_ubatch = 16;
  Context ctx(*model, cp);
  for (int64_t tokens : {16, 1}) {
    ScheduledGraph& sg = ctx.bucket(tokens, 1);
    const PlacementReport r = placement_report(sg, *reg, tokens, tokens == 1 ? "decode" : "prefill");
    uint64_t nodes = 0, views = 0;
    for (const Tensor* n : sg.graph().nodes()) (n->op == Op::View ? views : nodes)++;
    EXPECT_EQ(r.nodes, nodes);
    EXPECT_EQ(r.views, views);
    uint64_t sum_nodes = 0, sum_groups = 0;
    double node_share = 0, flop_share = 0, flops = 0;
    for (const BackendShare& b : r.backends) {
      sum_nodes += b.nodes;
      node_share += b.node_share;
      flop_share += b.flop_share;
      flops += b.flops;
    }
    for (const PlacementGroup& g : r.groups) sum_groups += g.nodes;
    EXPECT_EQ(sum_nodes, r.nodes);
    EXPECT_EQ(sum_groups, r.nodes);
    EXPECT_NEAR(node_share, 100.0, 1e-9);
    EXPECT_NEAR(flop_share, 100.0, 1e-9);
    EXPECT_NEAR(flops, r.flops, 1e-6 * r.flops);
    EXPECT_EQ(r.bytes_copied, sg.bytes_copied_per_run());
    EXPECT_EQ(r.copies, sg.n_copies());
    EXPECT_DOUBLE_EQ(r.bytes_copied_per_token, double(sg.bytes_copied_per_run()) / double(tokens));
    // matmul FLOPs from the shapes: 2 * K * N * T per weight
    double want_accel = 0;
    for (const Tensor* n : sg.graph().nodes())
      if (n->op != Op::View && sg.placement(n).device->name() == "test_accel") {
        ASSERT_EQ(n->op, Op::MulMat);
        want_accel += 2.0 * double(n->src[0]->ne[0]) * double(n->ne[0]) * double(n->ne[1]);
      }
    bool found = false;
    for (const BackendShare& b : r.backends)
      if (b.backend == "test_accel") {
        found = true;
        EXPECT_NEAR(b.flops, want_accel, 1e-6 * want_accel);
        EXPECT_GT(b.flop_share, 50.0);  // the matmuls carry most of the work
      }
    EXPECT_TRUE(found);
    // every fallback is on the CPU and has a reason
    double fb = 0;
    for (const PlacementGroup& f : r.fallbacks) {
      EXPECT_EQ(f.backend, "cpu");
      EXPECT_FALSE(f.reason.empty());
      fb += f.flops;
    }
    EXPECT_NEAR(fb, r.fallback_flops, 1e-9 + 1e-9 * fb);
    EXPECT_GT(r.bytes_copied, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PlacementReportOn, ::testing::Values("tiny-llama-q8_0", "tiny-qwen3-f16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(PlacementReport, GenericReasonGroupsLayers) {
  EXPECT_EQ(generic_reason("reads 'blk.12.attn_q.weight' held on x2"), "reads 'blk.N.attn_q.weight' held on x2");
}

TEST(PlacementReport, OpalOpsModelJson) {
  const std::string model = test::golden_model("tiny-llama-q8_0");
  std::string out;
  const std::string cmd = fmt::format("({} ops -m {} --backend test-accel -c 64 --prefill 8 -o json 2>/dev/null)",
                                      test::opal_binary(), model);
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  for (const char* phase : {"prefill", "decode"}) {
    const auto& p = j[phase];
    uint64_t nodes = 0;
    double share = 0;
    for (const auto& b : p["backends"]) {
      nodes += b["nodes"].get<uint64_t>();
      share += b["flop_share"].get<double>();
    }
    EXPECT_EQ(nodes, p["nodes"].get<uint64_t>()) << phase;
    EXPECT_NEAR(share, 100.0, 1e-6) << phase;
    EXPECT_GT(p["bytes_copied"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(j["prefill"]["tokens"], 8);
  EXPECT_EQ(j["decode"]["tokens"], 1);
  // 7 matmuls per layer x 2 layers + the lm head run on the accelerator
  uint64_t accel = 0;
  for (const auto& b : j["decode"]["backends"])
    if (b["backend"] == "test_accel") accel = b["nodes"];
  EXPECT_EQ(accel, 15u);
  // the markdown report names the fallbacks
  ASSERT_EQ(test::run_command(test::opal_binary() + " ops -m " + model + " --backend test-accel -c 64 2>&1", &out), 0);
  EXPECT_NE(out.find("CPU fallbacks"), std::string::npos);
  EXPECT_NE(out.find("test_accel runs only MUL_MAT, not RMS_NORM"), std::string::npos);
}

}  // namespace
}  // namespace opal
