// The rocket Device end to end on the emulator: golden models run with their
// MUL_MATs on the NPU (default precision w16a16) give logits within the q8_0
// tolerance of the CPU-only run (golden/README.md: max |diff| / std <= 0.15,
// min cosine >= 0.9995, top-1 >= 95 %), for every family; the int8-only knob
// (w8a8) is measured beside it; placement follows the min-batch setting with its reason;
// RunHooks see every node; a faulting driver makes the node fall back to the
// CPU kernel (same logits as the CPU) or, with fallback off, an error.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "backends/factory/backend_factory.h"
#include "backends/rocket/host/rocket_device.h"
#include "core/error.h"
#include "engine/golden_support.h"
#include "graph/registry.h"
#include "models/model.h"
#include "rocket/fault_driver.h"
#include "runtime/context.h"

namespace opal {
namespace {

struct Logits {
  std::vector<float> prompt, decode;
};

// The prompt in one batch, then `forced` tokens one at a time (teacher-forced:
// the same context whatever each run's argmax is).
Logits run_model(const Model& m, const std::vector<int32_t>& toks, const std::vector<int32_t>& forced,
                 RunHooks* hooks = nullptr) {
  ContextParams cp;
  cp.n_ctx = 128;
  Context ctx(m, cp);
  if (hooks) ctx.set_hooks(hooks);
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], int32_t(i), 0, true);
  ctx.decode(b);
  Logits l;
  for (int64_t i = 0; i < ctx.n_outputs(); ++i)
    l.prompt.insert(l.prompt.end(), ctx.logits(i), ctx.logits(i) + ctx.n_vocab());
  for (size_t i = 0; i < forced.size(); ++i) {
    b.clear();
    b.add(forced[i], int32_t(toks.size() + i), 0, true);
    ctx.decode(b);
    l.decode.insert(l.decode.end(), ctx.logits(0), ctx.logits(0) + ctx.n_vocab());
  }
  return l;
}

std::vector<int32_t> first(const std::vector<int32_t>& v, size_t n) {
  return {v.begin(), v.begin() + std::min(n, v.size())};
}

struct RocketSetup {
  std::unique_ptr<Registry> reg;
  RocketDevice* rocket = nullptr;
};

RocketSetup cpu_and_rocket(RocketOptions o, std::vector<std::unique_ptr<rocket::Driver>> drivers = {}) {
  RocketSetup s;
  s.reg = make_registry({}, 1);
  std::unique_ptr<RocketDevice> dev =
      drivers.empty() ? make_rocket_device(o) : std::make_unique<RocketDevice>(o, std::move(drivers));
  s.rocket = dev.get();
  s.reg->add(std::move(dev));
  return s;
}

class CountingHooks : public RunHooks {
 public:
  void before_node(const Device& dev, const Tensor&) override { open_ += dev.name() == "rocket"; }
  void after_node(const Device& dev, const Tensor& n, const char* kernel) override {
    if (dev.name() != "rocket") return;
    --open_;
    ++rocket_nodes;
    if (n.op != Op::MulMat) ++non_matmul;
    kernels.insert(kernel);
  }
  int open_ = 0, rocket_nodes = 0, non_matmul = 0;
  std::set<std::string> kernels;
};

class RocketAccuracy : public ::testing::TestWithParam<std::string> {};

struct Accuracy {
  test::Comparison vs_cpu, vs_llama_cpp;
  double top1_near_tie = 0;  // top-1 agreement, near-ties excused
};

// Runs `stem` with every MUL_MAT on the NPU (options `o`, min_batch 1) and on
// the CPU alone, checks the placement and hooks, and compares the logits.
Accuracy measure_accuracy(const std::string& stem, RocketOptions o) {
  const test::Golden g = test::load_golden(stem);
  const std::vector<int32_t>& toks = g.prompt;
  const std::vector<int32_t> forced = first(g.greedy, 4);
  auto cpu_reg = make_registry({}, 1);
  auto cpu_model = Model::load(test::golden_model_path(stem), *cpu_reg);
  const Logits want = run_model(*cpu_model, toks, forced);

  o.min_batch = 1;  // prompt and decode matmuls go to the NPU (decode as M = 1, padded to 4)
  RocketSetup s = cpu_and_rocket(o);
  auto model = Model::load(test::golden_model_path(stem), *s.reg);
  EXPECT_EQ(model->weight_placement().at(model->weight("blk.0.attn_q.weight")).device, s.rocket);
  EXPECT_EQ(model->weight_placement().at(model->weight("blk.1.ffn_down.weight")).device, s.rocket);
  CountingHooks hooks;
  const Logits got = run_model(*model, toks, forced, &hooks);
  EXPECT_GT(s.rocket->rocket_stats().nodes_npu, 0u);
  EXPECT_EQ(s.rocket->rocket_stats().nodes_fallback, 0u) << s.rocket->rocket_stats().last_error;
  EXPECT_EQ(hooks.open_, 0);
  EXPECT_EQ(hooks.non_matmul, 0);
  EXPECT_EQ(uint64_t(hooks.rocket_nodes), s.rocket->rocket_stats().nodes_npu);
  // The same counters through the generic Device interface, as `opal bench` reads them.
  const DeviceStats generic = s.rocket->stats();
  EXPECT_EQ(generic.get("nodes_run"), double(s.rocket->rocket_stats().nodes_npu));
  EXPECT_EQ(generic.get("nodes_fallback"), 0.0);
  EXPECT_EQ(generic.get("submits"), double(s.rocket->rocket_stats().submits));
  EXPECT_GT(generic.get("predicted_s"), 0.0);
  EXPECT_EQ(generic.get("predicted_s"), s.rocket->rocket_stats().predicted_s);
  EXPECT_EQ(generic.get("no_such_counter"), 0.0);
  EXPECT_FALSE(generic.prediction.model.empty());
  EXPECT_EQ(hooks.kernels, std::set<std::string>{"rocket-npu"});

  Accuracy acc;
  EXPECT_EQ(got.prompt.size(), want.prompt.size());
  EXPECT_EQ(got.decode.size(), want.decode.size());
  if (got.prompt.size() != want.prompt.size() || got.decode.size() != want.decode.size()) return acc;
  std::vector<float> ours = got.prompt, ref = want.prompt;
  ours.insert(ours.end(), got.decode.begin(), got.decode.end());
  ref.insert(ref.end(), want.decode.begin(), want.decode.end());
  acc.vs_cpu = test::compare_logits(ours, ref, g.n_vocab);
  // Top-1, with a disagreement excused only at a near-tie: where the CPU's own
  // gap between its token and ours is below twice that row's largest |diff|
  // (the rule tests/engine/test_fidelity.cpp applies to greedy steps).
  int64_t agree = 0;
  const int64_t rows = int64_t(ref.size()) / g.n_vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ours.data() + r * g.n_vocab;
    const float* b = ref.data() + r * g.n_vocab;
    const int64_t ia = test::argmax_row(a, g.n_vocab), ib = test::argmax_row(b, g.n_vocab);
    double row_max = 0;
    for (int64_t i = 0; i < g.n_vocab; ++i) row_max = std::max(row_max, double(std::fabs(a[i] - b[i])));
    agree += ia == ib || double(b[ib]) - double(b[ia]) < 2 * row_max;
  }
  acc.top1_near_tie = double(agree) / double(rows);
  // Against llama.cpp's own logits (teacher-forced prompt).
  acc.vs_llama_cpp = test::compare_logits(got.prompt, g.prompt_logits, g.n_vocab);
  std::printf(
      "  %-18s %-6s NPU vs CPU (%lld rows): max|d|/std %.4f  min cos %.6f  top-1 %.3f (near-tie rule %.3f)\n"
      "  %-18s %-6s NPU vs llama.cpp prompt: max|d|/std %.4f  min cos %.6f  top-1 %.3f\n",
      stem.c_str(), rocket::precision_name(o.precision), (long long)acc.vs_cpu.rows, acc.vs_cpu.max_diff_over_std,
      acc.vs_cpu.min_cosine, acc.vs_cpu.top1_agreement, acc.top1_near_tie, stem.c_str(),
      rocket::precision_name(o.precision), acc.vs_llama_cpp.max_diff_over_std, acc.vs_llama_cpp.min_cosine,
      acc.vs_llama_cpp.top1_agreement);
  return acc;
}

// The golden README's q8_0 bar, for every family, with the backend's default
// options: max |d|/std <= 0.15, min cosine >= 0.9995, top-1 >= 95 % (near-ties
// excused). The CPU reference quantizes activations to q8_0 for quantized
// weights (llama.cpp's x86 path) and the NPU path is ~15-bit on both operands,
// so what remains is mostly the CPU's own activation rounding.
TEST_P(RocketAccuracy, LogitsWithinQ8Tolerance) {
  const std::string stem = GetParam();
  const Accuracy a = measure_accuracy(stem, RocketOptions{});
  RecordProperty("max_diff_over_std", std::to_string(a.vs_cpu.max_diff_over_std));
  EXPECT_LE(a.vs_cpu.max_diff_over_std, 0.15);
  EXPECT_GE(a.vs_cpu.min_cosine, 0.9995);
  EXPECT_GE(a.top1_near_tie, 0.95) << "raw top-1 " << a.vs_cpu.top1_agreement;
  EXPECT_LE(a.vs_llama_cpp.max_diff_over_std, 0.15);
  EXPECT_GE(a.vs_llama_cpp.min_cosine, 0.9995);
}

// The int8-only knob (w8a8: one GEMM per matmul instead of three) is the
// measured trade-off: a larger error than the default on every model, still
// within the looser bound the backend had before the residual planes (0.30
// max/std against llama.cpp, cosine >= 0.998).
TEST_P(RocketAccuracy, Int8OnlyKnobIsCheaperAndLessAccurate) {
  const std::string stem = GetParam();
  RocketOptions o;
  o.precision = rocket::Precision::W8A8;
  const Accuracy w8 = measure_accuracy(stem, o);
  const Accuracy def = measure_accuracy(stem, RocketOptions{});
  EXPECT_GT(w8.vs_cpu.max_diff_over_std, def.vs_cpu.max_diff_over_std);
  EXPECT_LT(w8.vs_cpu.min_cosine, def.vs_cpu.min_cosine);
  EXPECT_LE(w8.vs_llama_cpp.max_diff_over_std, 0.30);
  EXPECT_GE(w8.vs_cpu.min_cosine, 0.998);
}

INSTANTIATE_TEST_SUITE_P(Golden, RocketAccuracy,
                         ::testing::Values("tiny-llama-q8_0", "tiny-llama-q4_0", "tiny-llama-f16", "tiny-qwen3-q8_0",
                                           "tiny-qwen3-f32"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(RocketDevice, MinBatchSendsSmallBatchesToTheCpu) {
  const test::Golden g = test::load_golden("tiny-llama-q8_0");
  RocketOptions o;
  o.min_batch = int64_t(g.prompt.size());  // the prompt qualifies, a decode step does not
  RocketSetup s = cpu_and_rocket(o);
  auto model = Model::load(test::golden_model_path("tiny-llama-q8_0"), *s.reg);
  const Placement& q = model->weight_placement().at(model->weight("blk.0.attn_q.weight"));
  EXPECT_EQ(q.device, s.rocket) << q.reason;
  CountingHooks hooks;
  run_model(*model, g.prompt, {}, &hooks);
  const uint64_t after_prompt = s.rocket->rocket_stats().nodes_npu;
  EXPECT_GE(after_prompt, 14u);                                  // 7 matmuls per layer x 2 layers (+ output)
  run_model(*model, {g.prompt[0]}, first(g.greedy, 2), &hooks);  // M = 1 everywhere
  EXPECT_EQ(s.rocket->rocket_stats().nodes_npu, after_prompt);

  // The reason users see.
  Tensor w, x, mm;
  w.type = DType::Q8_0;
  w.role = TensorRole::Weight;
  w.ne = {256, 256, 1, 1};
  x.ne = {256, 1, 1, 1};
  x.nb = contiguous_strides(DType::F32, x.ne);
  mm.op = Op::MulMat;
  mm.src[0] = &w;
  mm.src[1] = &x;
  mm.ne = {256, 1, 1, 1};
  mm.nb = contiguous_strides(DType::F32, mm.ne);
  const Support sup = s.rocket->supports(mm);
  EXPECT_FALSE(sup);
  EXPECT_NE(sup.reason.find("faster on the CPU"), std::string::npos) << sup.reason;
  w.type = DType::Q6_K;
  x.ne[1] = 64;
  x.nb = contiguous_strides(DType::F32, x.ne);
  EXPECT_NE(s.rocket->supports(mm).reason.find("weight type q6_K"), std::string::npos) << s.rocket->supports(mm).reason;
}

TEST(RocketDevice, SubmitFaultFallsBackToTheCpu) {
  const test::Golden g = test::load_golden("tiny-llama-q8_0");
  auto cpu_reg = make_registry({}, 1);
  auto cpu_model = Model::load(test::golden_model_path("tiny-llama-q8_0"), *cpu_reg);
  const Logits want = run_model(*cpu_model, g.prompt, first(g.greedy, 1));

  for (rocket::FaultKind kind :
       {rocket::FaultKind::SubmitFails, rocket::FaultKind::JobDropped, rocket::FaultKind::PrepTimesOut}) {
    SCOPED_TRACE(int(kind));
    RocketOptions o;
    o.min_batch = 1;
    o.timeout_s = 0.1;
    std::vector<std::unique_ptr<rocket::Driver>> d;
    d.push_back(std::make_unique<rocket::FaultDriver>(kind));
    auto* fd = static_cast<rocket::FaultDriver*>(d.back().get());
    RocketSetup s = cpu_and_rocket(o, std::move(d));
    auto model = Model::load(test::golden_model_path("tiny-llama-q8_0"), *s.reg);
    fd->armed = true;
    CountingHooks hooks;
    const Logits got = run_model(*model, g.prompt, first(g.greedy, 1), &hooks);
    EXPECT_GT(fd->faults, 0u);
    EXPECT_EQ(s.rocket->rocket_stats().nodes_npu, 0u);
    EXPECT_GT(s.rocket->rocket_stats().nodes_fallback, 0u);
    EXPECT_FALSE(s.rocket->rocket_stats().last_error.empty());
    EXPECT_EQ(hooks.kernels, std::set<std::string>{"rocket-cpu-fallback"});
    // The fallback is the CPU's own kernel on the GGUF bytes: the CPU's logits.
    EXPECT_EQ(got.prompt, want.prompt);
    EXPECT_EQ(got.decode, want.decode);
  }
}

TEST(RocketDevice, FaultWithoutFallbackIsAnError) {
  const test::Golden g = test::load_golden("tiny-llama-q8_0");
  RocketOptions o;
  o.min_batch = 1;
  o.fallback_to_cpu = false;
  std::vector<std::unique_ptr<rocket::Driver>> d;
  d.push_back(std::make_unique<rocket::FaultDriver>(rocket::FaultKind::SubmitFails));
  auto* fd = static_cast<rocket::FaultDriver*>(d.back().get());
  RocketSetup s = cpu_and_rocket(o, std::move(d));
  auto model = Model::load(test::golden_model_path("tiny-llama-q8_0"), *s.reg);
  fd->armed = true;
  try {
    run_model(*model, g.prompt, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SUBMIT"), std::string::npos) << e.what();
  }
}

TEST(RocketDevice, DrmUnavailableHasAReason) {
  RocketOptions o;
  o.driver = "drm_accel";
  o.device = "/dev/accel/opal-test-no-such-node";
  const Support s = rocket_drm_available(o.device);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.reason.find("/dev/accel") != std::string::npos) << s.reason;
  try {
    make_rocket_device(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unavailable"), std::string::npos) << e.what();
  }
  o.driver = "tpu";
  EXPECT_THROW(make_rocket_device(o), Error);
}

}  // namespace
}  // namespace opal
