// RWKV-7 (issue 17) end to end: fidelity against llama.cpp's golden logits
// (tiny-rwkv7 f32/f16/q8_0/q4_0 and f32-long, prompt in one batch and
// teacher-forced greedy decode) under every host ISA, with the README's
// rwkv7 tolerances:
//   f32 / f16: max|diff|/std <= 0.02, cosine >= 0.9999, top-1 100 % (one miss
//     allowed in f32-long, where one prompt row has a top-1/top-2 gap under
//     0.002 std), greedy identical;
//   q8_0: <= 0.20, cosine >= 0.999, top-1 >= 90 %, greedy identical;
//   q4_0: <= 0.20, cosine >= 0.995, top-1 >= 90 %, greedy compared up to the
//     first fork only at a near-tie.
// Then the recurrent state: batch = token by token, several sequences in one
// batch = each alone, and the sequence operations (reset, checkpoints, copy,
// keep, the errors for what a state cannot do), and load errors.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/kernels/isa.h"
#include "backends/factory/backend_factory.h"
#include "core/gguf.h"
#include "golden_support.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "runtime/generation.h"
#include "support/isa_coverage.h"

namespace opal {
namespace {

struct Tol {
  double max_diff_over_std, min_cosine, min_top1;
  bool greedy_identical;
};

Tol tol_for(const std::string& stem) {
  if (stem.ends_with("-long")) return {0.02, 0.9999, 1.0 - 1.5 / 256.0, true};
  if (stem.ends_with("-f32") || stem.ends_with("-f16")) return {0.02, 0.9999, 1.0, true};
  if (stem.ends_with("-q8_0")) return {0.20, 0.999, 0.90, true};
  return {0.20, 0.995, 0.90, false};
}

struct GoldenRun {
  std::vector<float> prompt, gen;
  std::vector<int32_t> next;
};

GoldenRun run_rwkv_golden(const test::Golden& g, Registry& reg) {
  auto model = Model::load(test::golden_model_path(g.stem), reg);
  ContextParams cp;
  cp.n_ctx = int64_t(g.prompt.size() + g.greedy.size());
  cp.n_batch = cp.n_ubatch = int64_t(g.prompt.size());
  Context ctx(*model, cp);
  EXPECT_TRUE(ctx.recurrent());
  GoldenRun r;
  Batch b;
  for (size_t i = 0; i < g.prompt.size(); ++i) b.add(g.prompt[i], int32_t(i), 0, true);
  ctx.decode(b);
  const int64_t nv = ctx.n_vocab();
  for (int64_t i = 0; i < ctx.n_outputs(); ++i) r.prompt.insert(r.prompt.end(), ctx.logits(i), ctx.logits(i) + nv);
  r.next.push_back(int32_t(test::argmax_row(ctx.logits(ctx.n_outputs() - 1), nv)));
  for (size_t i = 0; i < g.greedy.size(); ++i) {
    b.clear();
    b.add(g.greedy[i], int32_t(g.prompt.size() + i), 0, true);
    ctx.decode(b);
    r.gen.insert(r.gen.end(), ctx.logits(0), ctx.logits(0) + nv);
    r.next.push_back(int32_t(test::argmax_row(ctx.logits(0), nv)));
  }
  return r;
}

class Rwkv7Fidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(Rwkv7Fidelity, MatchesLlamaCppOnEveryIsa) {
  const std::string stem = GetParam();
  const test::Golden g = test::load_golden(stem);
  ASSERT_FALSE(g.prompt_logits.empty());
  const Tol tol = tol_for(stem);
  const cpu::Isa before = cpu::selected_isa();
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    cpu::set_isa(isa);
    auto reg = make_registry({}, 1);
    const GoldenRun r = run_rwkv_golden(g, *reg);
    ASSERT_EQ(r.prompt.size(), g.prompt_logits.size());
    ASSERT_EQ(r.gen.size(), g.gen_logits.size());
    for (const auto& [what, ours, ref] :
         {std::tuple{"prompt", &r.prompt, &g.prompt_logits}, std::tuple{"decode", &r.gen, &g.gen_logits}}) {
      const test::Comparison c = test::compare_logits(*ours, *ref, g.n_vocab);
      std::printf("  %-22s %-7s %-6s max|d|/std %.5f  min cos %.7f  top-1 %.3f\n", stem.c_str(), cpu::isa_name(isa),
                  what, c.max_diff_over_std, c.min_cosine, c.top1_agreement);
      EXPECT_LE(c.max_diff_over_std, tol.max_diff_over_std) << what << " " << cpu::isa_name(isa);
      EXPECT_GE(c.min_cosine, tol.min_cosine) << what << " " << cpu::isa_name(isa);
      EXPECT_GE(c.top1_agreement, tol.min_top1) << what << " " << cpu::isa_name(isa);
    }
    double max_abs = 0;
    for (size_t i = 0; i < r.prompt.size(); ++i)
      max_abs = std::max(max_abs, double(std::fabs(r.prompt[i] - g.prompt_logits[i])));
    int forks = 0;
    for (size_t i = 0; i < g.greedy.size(); ++i) {
      if (r.next[i] == g.greedy[i]) continue;
      ++forks;
      const float* ref = i == 0 ? g.prompt_logits.data() + (g.prompt.size() - 1) * size_t(g.n_vocab)
                                : g.gen_logits.data() + (i - 1) * size_t(g.n_vocab);
      const double gap = double(ref[g.greedy[i]]) - double(ref[r.next[i]]);
      std::printf("  %-22s greedy step %zu: ours %d, llama.cpp %d, gap %.4f\n", stem.c_str(), i, r.next[i], g.greedy[i],
                  gap);
      if (!tol.greedy_identical) {
        EXPECT_LT(gap, 2 * max_abs) << "greedy fork away from a near-tie at step " << i;
        break;  // compared up to the first fork
      }
    }
    if (tol.greedy_identical) {
      EXPECT_EQ(forks, 0) << "greedy tokens differ under " << cpu::isa_name(isa);
    }
  }
  cpu::set_isa(before);
}

INSTANTIATE_TEST_SUITE_P(Golden, Rwkv7Fidelity,
                         ::testing::Values("tiny-rwkv7-f32", "tiny-rwkv7-f16", "tiny-rwkv7-q8_0", "tiny-rwkv7-q4_0",
                                           "tiny-rwkv7-f32-long"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// ---- the recurrent state in the runtime

struct Fixture {
  std::unique_ptr<Registry> reg = make_registry({}, 2);
  std::unique_ptr<Model> model = Model::load(test::golden_model("tiny-rwkv7-f32"), *reg);
  std::vector<int32_t> prompt = test::load_golden("tiny-rwkv7-f32").prompt;
  std::unique_ptr<Context> ctx(int n_seq = 4, int64_t n_ctx = 256) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    return std::make_unique<Context>(*model, cp);
  }
  std::vector<float> last_logits(Context& c) {
    const float* p = c.logits(c.n_outputs() - 1);
    return {p, p + c.n_vocab()};
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

TEST(Rwkv7State, BatchEqualsTokenByTokenAndSequencesAreIndependent) {
  Fixture f;
  auto a = f.ctx();
  decode_prompt(*a, f.prompt);  // one batch
  const std::vector<float> batch = f.last_logits(*a);
  auto b = f.ctx();
  PromptOptions o;
  o.n_batch = 1;
  decode_prompt(*b, f.prompt, o);  // token by token
  EXPECT_LT(max_diff(batch, f.last_logits(*b)), 1e-4);

  // Two sequences interleaved token by token in one batch, the second with another prompt.
  std::vector<int32_t> other(f.prompt.rbegin(), f.prompt.rend());
  auto c = f.ctx();
  Batch bb;
  for (size_t i = 0; i < f.prompt.size(); ++i) {
    bb.add(f.prompt[i], int32_t(i), 3, i + 1 == f.prompt.size());
    bb.add(other[i], int32_t(i), 1, i + 1 == f.prompt.size());
  }
  c->decode(bb);
  ASSERT_EQ(c->n_outputs(), 2);
  const std::vector<float> s3(c->logits(0), c->logits(0) + c->n_vocab());
  const std::vector<float> s1(c->logits(1), c->logits(1) + c->n_vocab());
  EXPECT_LT(max_diff(s3, batch), 1e-4);
  auto d = f.ctx();
  decode_prompt(*d, other);
  EXPECT_LT(max_diff(s1, f.last_logits(*d)), 1e-4);
  EXPECT_EQ(c->seq_pos_max(3), int32_t(f.prompt.size()) - 1);
  EXPECT_EQ(c->seq_pos_min(1), 0);
}

TEST(Rwkv7State, SequenceOperations) {
  Fixture f;
  auto c = f.ctx(2);
  const size_t half = f.prompt.size() / 2;
  std::span<const int32_t> p(f.prompt);
  decode_prompt(*c, p.first(half));  // checkpoint after `half` tokens
  PromptOptions o;
  o.pos0 = int32_t(half);
  decode_prompt(*c, p.subspan(half), o);
  const std::vector<float> full = f.last_logits(*c);
  EXPECT_EQ(c->recurrent_state().checkpoints(0),
            (std::vector<int32_t>{int32_t(half) - 1, int32_t(f.prompt.size()) - 1}));

  // Truncating to a checkpoint restores it: decoding the rest again gives the same logits.
  EXPECT_EQ(c->seq_reusable_prefix(0, int32_t(f.prompt.size()) - 3), int32_t(half));
  c->seq_rm(0, int32_t(half), -1);
  EXPECT_EQ(c->seq_pos_max(0), int32_t(half) - 1);
  decode_prompt(*c, p.subspan(half), o);
  EXPECT_EQ(max_diff(full, f.last_logits(*c)), 0.0);

  // No checkpoint there, a middle range, skipped positions: clear errors, nothing changed.
  test::expect_error([&] { c->seq_rm(0, 3, -1); }, {"no checkpoint", "sequence 0"});
  test::expect_error([&] { c->seq_rm(0, 2, 5); }, "cannot forget part of its history");
  Batch b;
  b.add(f.prompt[0], int32_t(f.prompt.size()) + 4, 0, true);
  test::expect_error([&] { c->decode(b); }, "must be at position");
  EXPECT_EQ(c->seq_pos_max(0), int32_t(f.prompt.size()) - 1);
  test::expect_error([&] { c->kv_cache(); }, "no KV cache");

  // seq_cp copies the state: the copy continues exactly like the original.
  c->seq_cp(0, 1, -1, -1);
  b.clear();
  b.add(f.prompt[1], int32_t(f.prompt.size()), 0, true);
  b.add(f.prompt[1], int32_t(f.prompt.size()), 1, true);
  c->decode(b);
  EXPECT_EQ(max_diff({c->logits(0), c->logits(0) + c->n_vocab()}, {c->logits(1), c->logits(1) + c->n_vocab()}), 0.0);
  // Two slots only: a third live sequence is an error naming the limit.
  b.clear();
  b.add(f.prompt[0], 0, 7, true);
  test::expect_error([&] { c->decode(b); }, "holds states for 2");
  // seq_keep drops the others; removing a whole sequence resets it (it restarts at any position).
  c->seq_keep(1);
  EXPECT_EQ(c->seq_pos_max(0), -1);
  c->decode(b);
  c->seq_rm(7, -1, -1);
  EXPECT_EQ(c->seq_pos_max(7), -1);
  auto fresh = f.ctx();
  b.clear();
  b.add(f.prompt[0], 0, 0, true);
  fresh->decode(b);
  c->decode(b);
  EXPECT_EQ(max_diff(f.last_logits(*fresh), f.last_logits(*c)), 0.0) << "a reset state is zero";
  // Positions past n_ctx: the context-full rule of a recurrent model.
  auto small = f.ctx(1, 4);
  test::expect_error([&] { decode_prompt(*small, p.first(6)); }, "n_ctx");
}

TEST(Rwkv7State, SequencePrefixReuseUsesCheckpoints) {
  Fixture f;
  auto c = f.ctx();
  Sequence s(*c, 0);
  std::span<const int32_t> p(f.prompt);
  s.decode(p.first(20));
  s.decode(p.subspan(20, 5), PromptLogits::Last);  // checkpoints after 20 and 25 tokens
  std::vector<int32_t> next(f.prompt.begin(), f.prompt.begin() + 23);
  next.push_back(5);
  EXPECT_EQ(s.reuse_prefix(next), 20u) << "the latest checkpoint inside the common prefix (23)";
  EXPECT_EQ(s.size(), 20);
  Sequence other(*c, 1);  // a state is not per position: no prefix of it can be copied to another sequence
  EXPECT_FALSE(other.copy_prefix(s, 10));
  EXPECT_EQ(other.size(), 0);
  s.decode(std::span<const int32_t>(next).subspan(20));
  auto ref = f.ctx();
  decode_prompt(*ref, next);
  EXPECT_EQ(max_diff(f.last_logits(*c), f.last_logits(*ref)), 0.0);
}

TEST(Rwkv7Load, MissingTensorOrKeyIsAClearError) {
  const std::string src = test::golden_model("tiny-rwkv7-f32");
  const std::string dir = test::temp_dir();
  auto rewrite = [&](const std::string& out, const std::string& drop_key, const std::string& drop_tensor) {
    gguf::File f = gguf::File::open(src);
    gguf::Writer w;
    w.copy_metadata(f);
    if (!drop_key.empty()) w.remove(drop_key);
    for (const gguf::TensorInfo& t : f.tensors())
      if (t.name != drop_tensor) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    w.write(out);
  };
  auto reg = make_registry({}, 1);
  rewrite(dir + "/no_tensor.gguf", "", "blk.1.time_mix_k_k.weight");
  test::expect_error([&] { Model::load(dir + "/no_tensor.gguf", *reg); }, "blk.1.time_mix_k_k.weight");
  rewrite(dir + "/no_key.gguf", "rwkv7.wkv.head_size", "");
  test::expect_error([&] { Model::load(dir + "/no_key.gguf", *reg); }, "rwkv7.wkv.head_size");
}

}  // namespace
}  // namespace opal
