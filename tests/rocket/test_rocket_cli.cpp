// The rocket backend from the command line: `--backend rocket` (factory entry)
// puts the prompt's matmuls on the emulated NPU with logits close to the CPU's,
// `--backend rocket:drm` fails with the reason here (no /dev/accel), and
// `opal rocket predict` prints a prediction or names the known presets.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>

#include "engine/golden_support.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::string tokens_of(const test::Golden& g) {
  std::string s;
  for (int32_t t : g.prompt) {
    if (!s.empty()) s += ',';
    s += std::to_string(t);
  }
  return s;
}

TEST(RocketCli, BackendRocketRunsThePromptOnTheNpu) {
  const test::Golden g = test::load_golden("tiny-llama-q8_0");
  ASSERT_GE(g.prompt.size(), 32u);  // the default min batch
  const std::string model = test::golden_model_path("tiny-llama-q8_0");
  const std::string dir = test::temp_dir();
  std::string out;
  const std::string base = fmt::format("{} logits -m {} --tokens {} ", test::opal_binary(), model, tokens_of(g));
  ASSERT_EQ(test::run_command(base + "--out " + dir + "/cpu", &out), 0) << out;
  ASSERT_EQ(test::run_command(base + "--backend rocket --summary --out " + dir + "/npu", &out), 0) << out;
  EXPECT_NE(out.find("rocket"), std::string::npos) << out;  // the per-backend summary lists it
  const std::vector<float> cpu = test::read_f32_file(dir + "/cpu.prompt_logits.f32");
  const std::vector<float> npu = test::read_f32_file(dir + "/npu.prompt_logits.f32");
  ASSERT_EQ(cpu.size(), npu.size());
  ASSERT_FALSE(cpu.empty());
  const test::Comparison c = test::compare_logits(npu, cpu, g.n_vocab);
  EXPECT_LE(c.max_diff_over_std, 0.15);
  EXPECT_GT(c.max_diff_over_std, 0.0);  // the NPU's int8 path really ran (the CPU's would be identical)
}

TEST(RocketCli, DrmBackendExplainsWhyItIsUnavailable) {
  std::string out;
  const std::string cmd =
      fmt::format("{} logits -m {} --tokens 1,2 --backend rocket:drm --out {}/x", test::opal_binary(),
                  test::golden_model_path("tiny-llama-q8_0"), test::temp_dir());
  EXPECT_NE(test::run_command(cmd, &out), 0);
  EXPECT_NE(out.find("drm_accel backend is unavailable"), std::string::npos) << out;
}

TEST(RocketCli, Predict) {
  std::string out;
  ASSERT_EQ(test::run_command(test::opal_binary() + " rocket predict --preset qwen2-0.5b -p 128 --per-shape", &out), 0)
      << out;
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("ffn_down"), std::string::npos) << out;
  ASSERT_EQ(
      test::run_command(test::opal_binary() + " rocket predict -m " + test::golden_model_path("tiny-llama-q8_0"), &out),
      0)
      << out;
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  // The default precision (w16a16: three int8 GEMMs per matmul) predicts fewer tokens/s than w8a8.
  auto tokens_per_s = [](const std::string& o) {
    const size_t at = o.rfind("-> ");  // run_command appends to the string: the last line
    return at == std::string::npos ? -1.0 : std::atof(o.c_str() + at + 3);
  };
  const std::string predict = test::opal_binary() + " rocket predict --preset qwen3-0.6b -p 128";
  ASSERT_EQ(test::run_command(predict, &out), 0) << out;
  EXPECT_NE(out.find("w16a16"), std::string::npos) << out;
  const double wide = tokens_per_s(out);
  ASSERT_EQ(test::run_command(predict + " --precision w8a8", &out), 0) << out;
  EXPECT_GT(tokens_per_s(out), wide) << out;
  EXPECT_GT(wide, 0.0);
  EXPECT_NE(test::run_command(predict + " --precision int4", &out), 0);
  EXPECT_NE(out.find("unknown precision"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::opal_binary() + " rocket predict --preset gpt-17", &out), 0);
  EXPECT_NE(out.find("known: qwen2-0.5b"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
