// Fidelity against llama.cpp: every golden model's prompt logits (one batch)
// and teacher-forced one-token decode logits, judged with the tolerances of
// ../shared/golden/README.md:
//   f32 / f16 / bf16: max|diff|/std <= 0.02, cosine >= 0.9999, top-1 100 %,
//     greedy identical.
//   q8_0: <= 0.15, >= 0.9995, >= 95 %, greedy identical (no near-tie excuse).
//   2-6-bit types: <= 0.30, >= 0.995, >= 90 %; greedy may fork after a
//     near-tie (the README says so), so a fork is excused only where
//     llama.cpp's own gap is below twice our largest prompt-logit difference.
// Stronger, on x86 with the scalar, AVX2 or AVX-512 kernels: for the files
// whose arithmetic Opal emulates completely (docs/fidelity.md: llama.cpp's
// summation orders, its exp polynomial, its activation roundings), every row
// of logits must equal llama.cpp's bit for bit. A change of summation order
// anywhere on those paths fails here first: with f16 or 8-bit activation
// rounding downstream, a 1-ulp difference grows to ~0.002 (f16) or ~0.05
// (q8_0) of the logits' spread and forks greedy decoding at near-ties
// (llama.cpp's gaps of 0.082 and 0.0146 in tiny-llama-q8_0 / tiny-qwen3-q8_0).
// Greedy agreement is checked teacher-forced: after each golden greedy token
// our argmax must equal llama.cpp's next token, which is the same as the two
// greedy sequences being identical. The Gemma 3 / Gemma 4 files (issue 17)
// run under every ISA the host has (isas_for); the others under the selected
// one (OPAL_ISA).
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/kernels/isa.h"
#include "backends/factory/backend_factory.h"
#include "golden_support.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/isa_coverage.h"

namespace opal {
namespace {

using test::Comparison;

struct Tolerance {
  double max_diff_over_std, min_cosine, min_top1;
  bool greedy_identical;
  bool near_tie_excused = false;
  int rows_exempt = 0;  // MoE: rows whose expert choice flips on a router near-tie
};

Tolerance tolerance_for(const std::string& stem) {
  auto has = [&](const char* s) { return stem.find(s) != std::string::npos; };
  // MoE: a row whose expert choice flips on a router near-tie differs as a
  // whole (tiny-qwen3moe-f32 until MUL_MAT_ID passes GemmArgs::single_rows,
  // tiny-qwen3moe-q4_k_m at one decode step); one row per MoE file is exempt
  // from the tolerances (bit-identity, where expected, still covers it).
  const int moe_rows = has("moe") ? 1 : 0;
  if (has("stories260K") || has("-f32") || has("-f16") || has("-bf16"))
    return {0.02, 0.9999, 1.0, true, false, moe_rows};
  if (has("-q8_0")) return {0.15, 0.9995, 0.95, true, false, moe_rows};
  return {0.30, 0.995, 0.90, false, true, moe_rows};
}

// Files whose logits are bit-identical to llama.cpp's (x86 kernels).
bool expect_bit_identical(const std::string& stem) {
#if defined(__x86_64__)
  const cpu::Isa isa = cpu::selected_isa();
  if (isa != cpu::Isa::scalar && isa != cpu::Isa::avx2 && isa != cpu::Isa::avx2_vnni && isa != cpu::Isa::avx512)
    return false;
  for (const char* s : {"stories260K", "stories260K-kvf32", "tiny-llama-f32", "tiny-llama-f32-kvf32",
                        "tiny-llama-f32-long", "tiny-llama-f16", "tiny-llama-bf16", "tiny-llama-q8_0", "tiny-qwen3-f32",
                        "tiny-qwen3-f16", "tiny-qwen3-q8_0", "tiny-qwen3moe-f32", "tiny-qwen3moe-q8_0",
                        // issue 17, checked on scalar, AVX2 and AVX-512 (their prompt and decode rows)
                        "tiny-gemma3-q8_0", "tiny-gemma4-q8_0", "tiny-gemma4-q4_0"})
    if (stem == s) return true;
#endif
  (void)stem;
  return false;
}

struct RunResult {
  std::vector<float> prompt, gen;
  std::vector<int32_t> next_tokens;  // our argmax after the prompt and after each teacher-forced token
};

RunResult run_golden(const test::Golden& g, Registry& reg) {
  auto model = Model::load(test::golden_model_path(g.stem), reg);
  ContextParams cp;
  cp.n_ctx = int64_t(g.prompt.size() + g.greedy.size());
  cp.n_batch = cp.n_ubatch = int64_t(g.prompt.size());
  cp.kv_type = g.kv_type == "f32" ? DType::F32 : DType::F16;
  Context ctx(*model, cp);
  EXPECT_EQ(ctx.n_vocab(), g.n_vocab);
  RunResult r;
  Batch b;
  for (size_t i = 0; i < g.prompt.size(); ++i) b.add(g.prompt[i], int32_t(i), 0, true);
  ctx.decode(b);
  const int64_t nv = ctx.n_vocab();
  for (int64_t i = 0; i < ctx.n_outputs(); ++i) r.prompt.insert(r.prompt.end(), ctx.logits(i), ctx.logits(i) + nv);
  r.next_tokens.push_back(int32_t(test::argmax_row(ctx.logits(ctx.n_outputs() - 1), nv)));
  for (size_t i = 0; i < g.greedy.size(); ++i) {
    b.clear();
    b.add(g.greedy[i], int32_t(g.prompt.size() + i), 0, true);
    ctx.decode(b);
    r.gen.insert(r.gen.end(), ctx.logits(0), ctx.logits(0) + nv);
    r.next_tokens.push_back(int32_t(test::argmax_row(ctx.logits(0), nv)));
  }
  return r;
}

// Rows of logits equal to llama.cpp's bit for bit (a diagnostic: where the
// arithmetic is emulated exactly, whole rows match).
int64_t identical_rows(const std::vector<float>& ours, const std::vector<float>& ref, int64_t n_vocab) {
  int64_t n = 0;
  for (size_t r = 0; r + size_t(n_vocab) <= ref.size() && r + size_t(n_vocab) <= ours.size(); r += size_t(n_vocab))
    n += std::memcmp(ours.data() + r, ref.data() + r, size_t(n_vocab) * sizeof(float)) == 0;
  return n;
}

// The ISAs a file is checked under: the families of issue 17 (Gemma 3 / 4:
// sliding-window attention, GELU, per-layer inputs) under every ISA the host
// has (scalar, AVX2, AVX-512 here), the rest under the selected one
// (OPAL_ISA / --isa; docs/fidelity.md lists the runs under the others).
std::vector<cpu::Isa> isas_for(const std::string& stem) {
  if (stem.starts_with("tiny-gemma")) return test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; });
  return {cpu::selected_isa()};
}

void check_fidelity(const std::string& stem, const test::Golden& g) {
  auto reg = make_registry({}, 1);
  const RunResult r = run_golden(g, *reg);
  const Tolerance tol = tolerance_for(stem);
  const char* isa = cpu::isa_name(cpu::selected_isa());

  ASSERT_EQ(r.prompt.size(), g.prompt_logits.size());
  ASSERT_EQ(r.gen.size(), g.gen_logits.size());
  for (const auto& [what, ours, ref] :
       {std::tuple{"prompt", &r.prompt, &g.prompt_logits}, std::tuple{"decode", &r.gen, &g.gen_logits}}) {
    const Comparison c = test::compare_logits(*ours, *ref, g.n_vocab, tol.rows_exempt);
    ::testing::Test::RecordProperty(std::string(what) + "_" + isa + "_max_diff_over_std",
                                    std::to_string(c.max_diff_over_std));
    std::printf("  %-24s %-6s %-6s max|d|/std %.5f  min cos %.7f  top-1 %.3f  bit-identical rows %lld/%lld\n",
                stem.c_str(), isa, what, c.max_diff_over_std, c.min_cosine, c.top1_agreement,
                static_cast<long long>(identical_rows(*ours, *ref, g.n_vocab)), static_cast<long long>(c.rows));
    EXPECT_LE(c.max_diff_over_std, tol.max_diff_over_std) << what << " under " << isa;
    EXPECT_GE(c.min_cosine, tol.min_cosine) << what << " under " << isa;
    EXPECT_GE(c.top1_agreement, tol.min_top1) << what << " under " << isa;
    if (expect_bit_identical(stem)) {
      EXPECT_EQ(identical_rows(*ours, *ref, g.n_vocab), c.rows)
          << what << ": rows of logits not bit-identical to llama.cpp's under " << isa;
    }
  }
  // Teacher-forced greedy: f32/f16/bf16/q8_0 must agree at every step. For
  // the 2-6-bit types a differing step is excused only at a near-tie, i.e.
  // where llama.cpp's own gap between its token and ours is below twice the
  // largest prompt-logit difference we measured.
  double max_abs = 0;
  for (size_t i = 0; i < r.prompt.size(); ++i)
    max_abs = std::max(max_abs, double(std::fabs(r.prompt[i] - g.prompt_logits[i])));
  int forks = 0, unexcused = 0;
  for (size_t i = 0; i < g.greedy.size(); ++i) {
    if (r.next_tokens[i] == g.greedy[i]) continue;
    ++forks;
    const float* ref = i == 0 ? g.prompt_logits.data() + (g.prompt.size() - 1) * size_t(g.n_vocab)
                              : g.gen_logits.data() + (i - 1) * size_t(g.n_vocab);
    const double gap = double(ref[g.greedy[i]]) - double(ref[r.next_tokens[i]]);
    const bool excused = tol.near_tie_excused && gap < 2 * max_abs;
    unexcused += !excused;
    std::printf("  %-24s %-6s greedy step %zu: ours %d, llama.cpp %d, llama.cpp's gap %.4f (%s)\n", stem.c_str(), isa,
                i, r.next_tokens[i], g.greedy[i], gap, excused ? "near-tie" : "NOT a near-tie");
  }
  std::printf("  %-24s %-6s greedy: %d of %zu steps differ\n", stem.c_str(), isa, forks, g.greedy.size());
  if (tol.greedy_identical) {
    EXPECT_EQ(forks, 0) << "greedy tokens differ from llama.cpp's under " << isa;
  } else {
    EXPECT_EQ(unexcused, 0) << "greedy fork away from a near-tie under " << isa;
  }
}

class Fidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(Fidelity, MatchesLlamaCpp) {
  const std::string stem = GetParam();
  const test::Golden g = test::load_golden(stem);
  ASSERT_FALSE(g.prompt_logits.empty());
  const cpu::Isa before = cpu::selected_isa();
  for (cpu::Isa isa : isas_for(stem)) {
    cpu::set_isa(isa);
    check_fidelity(stem, g);
  }
  cpu::set_isa(before);
}

INSTANTIATE_TEST_SUITE_P(
    Golden, Fidelity,
    ::testing::Values("stories260K", "stories260K-kvf32", "tiny-llama-f32", "tiny-llama-f32-kvf32",
                      "tiny-llama-f32-long", "tiny-llama-f16", "tiny-llama-bf16", "tiny-llama-q8_0", "tiny-llama-q4_0",
                      "tiny-llama-q4_1", "tiny-llama-q5_0", "tiny-llama-q5_1", "tiny-llama-q2_k", "tiny-llama-q3_k_m",
                      "tiny-llama-q4_k_m", "tiny-llama-q5_k_m", "tiny-llama-q6_k", "tiny-qwen3-f32", "tiny-qwen3-f16",
                      "tiny-qwen3-q8_0", "tiny-qwen3-q4_0", "tiny-qwen3-q4_k_m", "tiny-qwen3-q6_k", "tiny-qwen3moe-f32",
                      "tiny-qwen3moe-q8_0", "tiny-qwen3moe-q4_k_m",
                      // Gemma 3 (issue 17): sliding-window layers, GELU, post norms
                      "tiny-gemma3-f32", "tiny-gemma3-f32-kvf32", "tiny-gemma3-f32-long", "tiny-gemma3-f16",
                      "tiny-gemma3-q8_0", "tiny-gemma3-q4_0", "tiny-gemma3-q4_k_m",
                      // Gemma 4 (issue 17): per-layer embeddings, KV sharing, soft-cap
                      "tiny-gemma4-f32", "tiny-gemma4-f32-kvf32", "tiny-gemma4-f32-long", "tiny-gemma4-q8_0",
                      "tiny-gemma4-q4_0"),
    [](const auto& info) {
      std::string s = info.param;
      for (char& ch : s)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return s;
    });

}  // namespace
}  // namespace opal
