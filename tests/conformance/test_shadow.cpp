// Shadow compare: passes on correct backends and finds an injected fault (a
// deliberately wrong accelerator kernel), naming the node.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_device.h"
#include "backends/factory/backend_factory.h"
#include "backends/shadow/shadow_compare.h"
#include "backends/test_accel/test_accel.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

// The test accelerator with one wrong kernel: after it computes the node
// named `victim`, one output value is off by `delta` (before anyone sees it).
class FaultyAccel : public TestAccelDevice {
 public:
  FaultyAccel(std::string victim, float delta)
      : inner_(TestAccelDevice::executor()), exec_(*this, std::move(victim), delta) {}
  Executor& executor() override { return exec_; }

 private:
  struct Corrupting : RunHooks {
    RunHooks* next = nullptr;
    std::string victim;
    float delta = 0;
    void before_node(const Device& d, const Tensor& n) override {
      if (next) next->before_node(d, n);
    }
    void after_node(const Device& d, const Tensor& n, const char* k) override {
      if (n.name == victim) {
        float v;
        n.buffer->read(uint64_t(static_cast<uint8_t*>(n.data) - static_cast<uint8_t*>(n.buffer->base())) + 4 * 5, &v,
                       4);
        v += delta;
        n.buffer->write(uint64_t(static_cast<uint8_t*>(n.data) - static_cast<uint8_t*>(n.buffer->base())) + 4 * 5, &v,
                        4);
      }
      if (next) next->after_node(d, n, k);
    }
  };
  struct Exec : Executor {
    Exec(FaultyAccel& dev, std::string victim, float delta) : dev(dev) {
      hooks.victim = std::move(victim);
      hooks.delta = delta;
    }
    std::unique_ptr<Plan> compile(const Segment& s) override { return dev.inner_.compile(s); }
    void run(Plan& p, RunHooks* h) override {
      hooks.next = h;
      dev.inner_.run(p, &hooks);
    }
    FaultyAccel& dev;
    Corrupting hooks;
  };
  Executor& inner_;
  Exec exec_;
};

struct Loaded {
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
};

Loaded load(std::unique_ptr<Device> accel) {
  Loaded s;
  s.reg = make_registry({}, 1);
  s.reg->add(std::move(accel));
  s.model = Model::load(test::golden_model("tiny-llama-q8_0"), *s.reg);
  ContextParams cp;
  cp.n_ctx = 32;
  s.ctx = std::make_unique<Context>(*s.model, cp);
  return s;
}

void run_some(Context& ctx) {
  Batch b;
  for (int i = 0; i < 5; ++i) b.add(3 + i, i, 0, i == 4);
  ctx.decode(b);
  b.clear();
  b.add(9, 5, 0, true);
  ctx.decode(b);
}

std::string victim_name(Context& ctx, const char* weight) {
  // the MUL_MAT reading `weight` in the 5-token bucket
  for (const Tensor* n : ctx.bucket(5, 1).graph().nodes())
    if (n->op == Op::MulMat && n->src[0]->storage()->name == weight) return n->name;
  return {};
}

TEST(Shadow, PassesOnACorrectBackend) {
  Loaded s = load(std::make_unique<TestAccelDevice>());
  ShadowCompare shadow;
  s.ctx->set_hooks(&shadow);
  run_some(*s.ctx);
  EXPECT_FALSE(shadow.diverged()) << shadow.report();
  EXPECT_EQ(shadow.compared(), 30u);  // 15 matmuls per run, 2 runs
  EXPECT_NE(shadow.report().find("no divergence"), std::string::npos);
}

TEST(Shadow, FindsAnInjectedFaultAndNamesTheNode) {
  Loaded probe = load(std::make_unique<TestAccelDevice>());
  const std::string victim = victim_name(*probe.ctx, "blk.1.ffn_up.weight");
  ASSERT_FALSE(victim.empty());
  Loaded s = load(std::make_unique<FaultyAccel>(victim, 3.0f));
  ShadowCompare shadow;
  s.ctx->set_hooks(&shadow);
  run_some(*s.ctx);
  ASSERT_TRUE(shadow.diverged());
  const ShadowDivergence* d = shadow.first_divergence();
  EXPECT_EQ(d->tensor, victim);
  EXPECT_EQ(d->op, "MUL_MAT");
  EXPECT_EQ(d->backend, "test_accel");
  EXPECT_NEAR(d->max_abs, 3.0, 0.05);
  EXPECT_GT(d->nmse, d->tolerance);
  // nodes before it in the same run passed: it is the 11th accelerator matmul (layer 1's up projection)
  EXPECT_GT(d->node_index, 0u);
  EXPECT_NE(shadow.report().find(victim), std::string::npos) << shadow.report();
}

TEST(Shadow, CpuOnlyRunsCompareNothing) {
  auto reg = make_registry({}, 1);
  auto model = Model::load(test::golden_model("tiny-llama-q8_0"), *reg);
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  ShadowCompare shadow;
  ctx.set_hooks(&shadow);
  run_some(ctx);
  EXPECT_EQ(shadow.compared(), 0u);
  EXPECT_FALSE(shadow.diverged());
}

TEST(Shadow, CliReportsDivergenceFreeRun) {
  std::string out;
  ASSERT_EQ(test::run_command(test::opal_binary() + " run -m " + test::golden_model("tiny-llama-f16") +
                                  " -p hello -n 4 --temp 0 -c 32 -t 1 --backend test-accel --shadow 2>&1",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("shadow: "), std::string::npos) << out;
  EXPECT_NE(out.find("no divergence"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
