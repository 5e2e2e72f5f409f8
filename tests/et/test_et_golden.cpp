// Golden models end to end with --backend et on the in-process emulator
// (coherence checker on): logits against llama.cpp's (../shared/golden) with
// the README's tolerances per weight type, judged on whole rows of logits:
//   f32 / f16: max|diff|/std <= 0.02, cosine >= 0.9999, top-1 100 %;
//   q8_0: <= 0.15, >= 0.9995, >= 95 %;
//   4-bit (q4_0, q4_k_m): <= 0.30, >= 0.995, >= 90 %.
// The ET kernels quantize activations per block as llama.cpp does, but sum in
// their own order (8 lanes, per-hart partial sums) and use et_math.h's exp and
// reciprocal, so bit-identity is not expected; the tolerances are the bar.
// Top-1: the README judges "the whole logits vector" against the max|diff|
// bar, so a row whose argmax differs only because llama.cpp's own two
// candidates are closer than the noise that bar allows is a near-tie, not an
// error: a differing row counts as agreeing when llama.cpp's gap between its
// token and ours is below twice our largest |diff| in that row (the near-tie
// rule of tests/engine/test_fidelity.cpp) and that |diff| is itself within the
// max|diff|/std bar. Every such row is printed with its gap.
//
// Emulator time is the cost (a tiny model's token takes seconds), so CI runs
// a short form: the first kCiPrompt prompt tokens in one batch (their rows of
// the golden prompt logits: causal attention makes them independent of the
// later tokens) and the next kCiDecode prompt tokens one at a time (the
// decode path, compared with the golden prompt rows at those positions), for
// two files. The full form (whole prompt, every teacher-forced greedy step,
// every supported file) runs with OPAL_ET_GOLDEN_FULL=1
// (scripts/et_golden.sh), and prints max|diff|/std per file.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "backends/et/host/et_device.h"
#include "backends/factory/backend_factory.h"
#include "engine/golden_support.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"

namespace opal {
namespace {

constexpr size_t kCiPrompt = 8, kCiDecode = 2;

struct Tol {
  double max_diff_over_std, min_cosine, min_top1;
  int rows_exempt = 0;
};

// MoE files: as in tests/engine/test_fidelity.cpp, one row per phase may be
// left out of max|diff| and cosine: a router near-tie that picks another
// expert changes that row as a whole (its top-1 still counts, and the
// exempted row's figures are printed).
Tol tolerance_for(const std::string& stem) {
  auto has = [&](const char* s) { return stem.find(s) != std::string::npos; };
  const int moe_rows = has("moe") ? 1 : 0;
  if (has("-f32") || has("-f16")) return {0.02, 0.9999, 1.0, moe_rows};
  if (has("-q8_0")) return {0.15, 0.9995, 0.95, moe_rows};
  return {0.30, 0.995, 0.90, moe_rows};
}

bool full_mode() {
  const char* e = std::getenv("OPAL_ET_GOLDEN_FULL");
  return e && std::string(e) == "1";
}

struct EtRun {
  std::vector<float> rows_batch, rows_single;  // logits of the batch, then of each one-token step
  std::vector<float> ref_batch, ref_single;    // llama.cpp's rows at the same positions
  uint64_t nodes_run = 0, nodes_fallback = 0;
  double seconds = 0;
};

// The prompt's first n_batch tokens in one batch, then `singles` tokens one at
// a time: the rest of the prompt (compared with the golden prompt rows), then
// (full form) the greedy tokens (compared with the golden decode rows).
EtRun run_et(const test::Golden& g, size_t n_batch, size_t n_prompt_singles, size_t n_greedy) {
  auto reg = make_registry({}, 1);
  EtOptions o;  // 1 shire, 64 harts, coherence checker on
  auto dev = make_et_device(o);
  EtDevice* et = dev.get();
  reg->add(std::move(dev));
  auto model = Model::load(test::golden_model_path(g.stem), *reg);
  ContextParams cp;
  cp.n_ctx = int64_t(g.prompt.size() + g.greedy.size());
  cp.n_batch = cp.n_ubatch = int64_t(n_batch);
  cp.kv_type = g.kv_type == "f32" ? DType::F32 : DType::F16;
  Context ctx(*model, cp);
  const int64_t nv = ctx.n_vocab();
  EtRun r;
  auto t0 = std::chrono::steady_clock::now();
  Batch b;
  for (size_t i = 0; i < n_batch; ++i) b.add(g.prompt[i], int32_t(i), 0, true);
  ctx.decode(b);
  for (int64_t i = 0; i < ctx.n_outputs(); ++i)
    r.rows_batch.insert(r.rows_batch.end(), ctx.logits(i), ctx.logits(i) + nv);
  r.ref_batch.assign(g.prompt_logits.begin(), g.prompt_logits.begin() + int64_t(n_batch) * nv);
  auto single = [&](int32_t tok, size_t pos) {
    b.clear();
    b.add(tok, int32_t(pos), 0, true);
    ctx.decode(b);
    r.rows_single.insert(r.rows_single.end(), ctx.logits(0), ctx.logits(0) + nv);
  };
  for (size_t i = n_batch; i < n_batch + n_prompt_singles; ++i) {
    single(g.prompt[i], i);
    r.ref_single.insert(r.ref_single.end(), g.prompt_logits.begin() + int64_t(i) * nv,
                        g.prompt_logits.begin() + int64_t(i + 1) * nv);
  }
  for (size_t i = 0; i < n_greedy; ++i) {
    single(g.greedy[i], g.prompt.size() + i);
    r.ref_single.insert(r.ref_single.end(), g.gen_logits.begin() + int64_t(i) * nv,
                        g.gen_logits.begin() + int64_t(i + 1) * nv);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.nodes_run = et->et_stats().nodes_run;
  r.nodes_fallback = et->et_stats().nodes_fallback;
  return r;
}

double stdev_of(const std::vector<float>& v) {
  double mean = 0, sq = 0;
  for (float x : v) mean += x;
  mean /= double(v.size());
  for (float x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(v.size()));
}

// Top-1 agreement with near-ties counted as agreeing (see the top of the file).
double top1_with_near_ties(const std::string& stem, const char* what, const std::vector<float>& ours,
                           const std::vector<float>& ref, int64_t n_vocab, double max_diff_over_std) {
  const int64_t rows = int64_t(ref.size()) / n_vocab;
  const double sd = stdev_of(ref);
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ours.data() + r * n_vocab;
    const float* b = ref.data() + r * n_vocab;
    const int64_t ta = test::argmax_row(a, n_vocab), tb = test::argmax_row(b, n_vocab);
    if (ta == tb) {
      ++agree;
      continue;
    }
    double row_max = 0;
    for (int64_t i = 0; i < n_vocab; ++i) row_max = std::max(row_max, std::fabs(double(a[i]) - double(b[i])));
    const double gap = double(b[tb]) - double(b[ta]);
    const bool tie = gap < 2 * row_max && row_max <= max_diff_over_std * sd;
    agree += tie;
    std::printf(
        "  et %-22s %-6s row %lld: top-1 ours %lld, llama.cpp %lld; llama.cpp's gap %.5f = %.5f std, our row "
        "max|d| %.5f std (%s)\n",
        stem.c_str(), what, static_cast<long long>(r), static_cast<long long>(ta), static_cast<long long>(tb), gap,
        gap / sd, row_max / sd, tie ? "near-tie" : "NOT a near-tie");
  }
  return rows ? double(agree) / double(rows) : 1.0;
}

void check(const std::string& stem, bool full) {
  if (!et_unavailable_reason().empty()) GTEST_SKIP() << et_unavailable_reason();
  const test::Golden g = test::load_golden(stem);
  ASSERT_FALSE(g.prompt_logits.empty()) << stem;
  const EtRun r = full ? run_et(g, g.prompt.size(), 0, g.greedy.size()) : run_et(g, kCiPrompt, kCiDecode, 0);
  EXPECT_GT(r.nodes_run, 0u);
  EXPECT_EQ(r.nodes_fallback, 0u) << "a kernel faulted (see stderr)";
  const Tol tol = tolerance_for(stem);
  for (const auto& [what, ours, ref] : {std::tuple{full ? "prompt" : "batch", &r.rows_batch, &r.ref_batch},
                                        std::tuple{full ? "decode" : "single", &r.rows_single, &r.ref_single}}) {
    ASSERT_EQ(ours->size(), ref->size()) << what;
    test::Comparison c = test::compare_logits(*ours, *ref, g.n_vocab, tol.rows_exempt);
    if (tol.rows_exempt) {
      const test::Comparison all = test::compare_logits(*ours, *ref, g.n_vocab);
      std::printf("  et %-22s %-6s all rows: max|d|/std %.5f  min cos %.7f (%d row exempt, MoE)\n", stem.c_str(), what,
                  all.max_diff_over_std, all.min_cosine, tol.rows_exempt);
    }
    c.top1_agreement = top1_with_near_ties(stem, what, *ours, *ref, g.n_vocab, tol.max_diff_over_std);
    std::printf("  et %-22s %-6s rows %3lld  max|d|/std %.5f  min cos %.7f  top-1 %.3f  (%.1f s)\n", stem.c_str(), what,
                static_cast<long long>(c.rows), c.max_diff_over_std, c.min_cosine, c.top1_agreement, r.seconds);
    ::testing::Test::RecordProperty(std::string(what) + "_max_diff_over_std", std::to_string(c.max_diff_over_std));
    EXPECT_LE(c.max_diff_over_std, tol.max_diff_over_std) << stem << " " << what;
    EXPECT_GE(c.min_cosine, tol.min_cosine) << stem << " " << what;
    EXPECT_GE(c.top1_agreement, tol.min_top1) << stem << " " << what;
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class EtGoldenCi : public ::testing::TestWithParam<std::string> {};
TEST_P(EtGoldenCi, ShortRunWithinTolerance) { check(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(Et, EtGoldenCi, ::testing::Values("tiny-llama-q8_0", "tiny-qwen3-q4_k_m"), param_name);

class EtGoldenFull : public ::testing::TestWithParam<std::string> {};
TEST_P(EtGoldenFull, WholePromptAndGreedyWithinTolerance) {
  if (!full_mode()) GTEST_SKIP() << "emulator-heavy: set OPAL_ET_GOLDEN_FULL=1 (scripts/et_golden.sh)";
  check(GetParam(), true);
}
INSTANTIATE_TEST_SUITE_P(Et, EtGoldenFull,
                         ::testing::Values("tiny-llama-f32", "tiny-llama-f16", "tiny-llama-q8_0", "tiny-llama-q4_0",
                                           "tiny-llama-q4_k_m", "tiny-qwen3-f32", "tiny-qwen3-f16", "tiny-qwen3-q8_0",
                                           "tiny-qwen3-q4_0", "tiny-qwen3-q4_k_m", "tiny-qwen3moe-f32",
                                           "tiny-qwen3moe-q8_0", "tiny-qwen3moe-q4_k_m"),
                         param_name);

}  // namespace
}  // namespace opal
