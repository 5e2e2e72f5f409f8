// RoPE scaling: YaRN (graph/rope.h) against the formulas written out in
// double precision, plus whole-model checks with YaRN metadata.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "backends/factory/backend_factory.h"
#include "core/gguf.h"
#include "graph/registry.h"
#include "graph/rope.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

double corr_dim(int n_rot, double n_ctx_orig, double base, double beta) {
  return n_rot * std::log(n_ctx_orig / (beta * 2 * std::numbers::pi)) / (2 * std::log(base));
}

TEST(Yarn, CorrectionRangeFollowsTheFormula) {
  for (auto [n_rot, n_orig, base] : {std::tuple{128, 4096, 1e6}, {64, 2048, 10000.0}, {128, 32768, 1e6}}) {
    int32_t lo = -1, hi = -1;
    yarn_corr_dims(n_rot, n_orig, float(base), 32.0f, 1.0f, &lo, &hi);
    EXPECT_EQ(lo, std::max(0, int(std::floor(corr_dim(n_rot, n_orig, base, 32)))));
    EXPECT_EQ(hi, std::min(n_rot - 1, int(std::ceil(corr_dim(n_rot, n_orig, base, 1)))));
    EXPECT_LT(lo, hi);
  }
}

TEST(Yarn, AnglesMixExtrapolationAndInterpolation) {
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 10000.0f;
  p.freq_scale = 0.25f;  // factor 4
  p.ext_factor = 1.0f;
  p.attn_factor = 1.0f;
  yarn_corr_dims(p.n_rot, 2048, p.freq_base, 32.0f, 1.0f, &p.corr_low, &p.corr_high);
  const float pos = 1234.0f;
  std::vector<float> cs(64);
  rope_cos_sin(p, pos, nullptr, cs.data());
  const double mscale = 1.0 + 0.1 * std::log(4.0);
  for (int i = 0; i < 32; ++i) {
    const double extrap = pos * std::pow(10000.0, -2.0 * i / 64);
    const double y = (double(i) - p.corr_low) / std::max(0.001, double(p.corr_high - p.corr_low));
    const double mix = 1.0 - std::min(1.0, std::max(0.0, y));
    const double theta = 0.25 * extrap * (1 - mix) + extrap * mix;
    // Float angles of up to ~1234 rad: compare the angle through cos/sin to 1e-3.
    EXPECT_NEAR(cs[2 * i], std::cos(theta) * mscale, 2e-3) << "pair " << i;
    EXPECT_NEAR(cs[2 * i + 1], std::sin(theta) * mscale, 2e-3) << "pair " << i;
  }
  // Without YaRN the same settings are plain linear scaling with magnitude 1.
  p.ext_factor = 0.0f;
  rope_cos_sin(p, pos, nullptr, cs.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(std::hypot(cs[2 * i], cs[2 * i + 1]), 1.0, 1e-6);
}

std::string with_yarn(const std::string& src, double factor, int64_t n_orig, const std::string& name) {
  gguf::File f = gguf::File::open(src);
  gguf::Writer w;
  w.copy_metadata(f);
  const std::string arch = f.get_string("general.architecture", "");
  w.set(arch + ".rope.scaling.type", gguf::Value::from_string("yarn"));
  w.set(arch + ".rope.scaling.factor", gguf::Value::from_f32(float(factor)));
  w.set(arch + ".rope.scaling.original_context_length", gguf::Value::from_u32(uint32_t(n_orig)));
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  const std::string path = test::temp_dir() + "/" + name + ".gguf";
  w.write(path);
  return path;
}

std::vector<float> run_prompt(const std::string& path, int32_t pos0) {
  auto reg = make_registry({}, 1);
  auto model = Model::load(path, *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  cp.kv_type = DType::F32;
  Context ctx(*model, cp);
  Batch b;
  for (int i = 0; i < 10; ++i) b.add(5 + 11 * i, pos0 + i, 0, i == 9);
  ctx.decode(b);
  return {ctx.logits(0), ctx.logits(0) + ctx.n_vocab()};
}

TEST(Yarn, FactorOneIsTheUnscaledModel) {
  const std::string base = test::golden_model("tiny-qwen3-f32");
  // Factor 1: interpolation equals extrapolation and the magnitude is 1, so
  // only the float rounding of the mix remains.
  const auto a = run_prompt(with_yarn(base, 1.0, 64, "yarn1"), 0), b = run_prompt(base, 0);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST(Yarn, FactorFourChangesLogitsAndKeepsThemFinite) {
  const std::string base = test::golden_model("tiny-qwen3-f32");
  const auto a = run_prompt(base, 0), b = run_prompt(with_yarn(base, 4.0, 16, "yarn4"), 0);
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(b[i]));
    d = std::max(d, double(std::fabs(a[i] - b[i])));
  }
  EXPECT_GT(d, 1e-3);
}

TEST(Yarn, KeyShiftIsExactUnderYarn) {
  // Keys shifted by seq_add equal keys computed at the new positions, with
  // the YaRN magnitude applied once (not twice).
  const std::string path = with_yarn(test::golden_model("tiny-qwen3-f32"), 4.0, 16, "yarnshift");
  auto reg = make_registry({}, 1);
  auto model = Model::load(path, *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  cp.kv_type = DType::F32;
  auto decode = [&](Context& ctx, int32_t pos0, int n, bool last_only) {
    Batch b;
    for (int i = 0; i < n; ++i) b.add(5 + 11 * i, pos0 + i, 0, !last_only || i + 1 == n);
    ctx.decode(b);
  };
  Context want_ctx(*model, cp);
  decode(want_ctx, 0, 11, true);
  const std::vector<float> want(want_ctx.logits(0), want_ctx.logits(0) + want_ctx.n_vocab());
  Context ctx(*model, cp);
  decode(ctx, 5, 10, true);
  ctx.seq_add(0, 0, -1, -5);
  Batch b;
  b.add(5 + 11 * 10, 10, 0, true);
  ctx.decode(b);
  double d = 0, s = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, double(std::fabs(ctx.logits(0)[i] - want[i])));
    s += double(want[i]) * want[i];
  }
  EXPECT_LT(d / std::sqrt(s / double(want.size())), 1e-3);
}

TEST(Yarn, UnknownScalingTypeIsAClearError) {
  const std::string src = test::golden_model("tiny-qwen3-f32");
  gguf::File f = gguf::File::open(src);
  gguf::Writer w;
  w.copy_metadata(f);
  w.set("qwen3.rope.scaling.type", gguf::Value::from_string("longrope9"));
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  const std::string path = test::temp_dir() + "/badscaling.gguf";
  w.write(path);
  auto reg = make_registry({}, 1);
  try {
    Model::load(path, *reg);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'longrope9' is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace opal
