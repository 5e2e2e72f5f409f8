// The generation API (runtime/generation.h) on stories260K: prompt decode in
// n_batch chunks, the stop rules (end of generation, n_predict, a full
// context), the streaming callback (order, stop request), prefix reuse that
// decodes only the suffix and gives a fresh decode's logits, chat state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generation.h"
#include "support/test_support.h"

namespace opal {
namespace {

std::vector<float> gen_last_logits(const Context& ctx) {
  const float* l = ctx.logits(ctx.n_outputs() - 1);
  return {l, l + ctx.n_vocab()};
}

// Logits of different batch shapes (a suffix after a cached prefix, a chunk,
// another output count) agree to rounding, not bit for bit: the kernels'
// row blocking differs. A wrong prefix is far outside (test_kv_ops.cpp).
void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  double m = 0, s = 0, s2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    m = std::max(m, double(std::fabs(got[i] - want[i])));
    s += want[i], s2 += double(want[i]) * want[i];
  }
  const double mean = s / double(want.size());
  const double sd = std::sqrt(s2 / double(want.size()) - mean * mean);
  EXPECT_LT(m / sd, 1e-4) << "max |diff| " << m << ", std " << sd;
  EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(),
            std::max_element(want.begin(), want.end()) - want.begin());
}

struct Generation : ::testing::Test {
  void SetUp() override {
    reg = make_registry({}, 1);
    model = Model::load(test::shared_path("models/stories260K.gguf"), *reg);
    vocab.emplace(Vocab::from_gguf(model->gguf()));
    ctx = make_context(64);
    prompt = vocab->tokenize("Once upon a time", true, false);
    ASSERT_GE(prompt.size(), 3u);
  }
  std::unique_ptr<Context> make_context(int64_t n_ctx, int64_t n_batch = 2048) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.kv_type = DType::F32;
    return std::make_unique<Context>(*model, cp);
  }
  // Greedy; `eog_bias` is added to every end-of-generation token's logit.
  SamplerParams greedy(float eog_bias = 0) const {
    SamplerParams p;
    p.temp = 0;
    if (eog_bias != 0)
      for (int32_t t : vocab->eog_ids()) p.logit_bias.push_back({t, eog_bias});
    return p;
  }
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Model> model;
  std::optional<Vocab> vocab;
  std::unique_ptr<Context> ctx;
  std::vector<int32_t> prompt;
};

constexpr float kBan = -std::numeric_limits<float>::infinity();

TEST_F(Generation, PromptInChunksGivesTheLogitsOfOneBatch) {
  std::vector<int32_t> toks;
  for (int i = 0; i < 11; ++i) toks.push_back(int32_t(3 + (i * 37) % 500));
  PromptOptions all;
  all.logits = PromptLogits::All;
  std::vector<std::vector<float>> one, chunked;
  size_t calls = 0;
  all.on_chunk = [&](size_t b, size_t e) {
    ++calls;
    for (size_t i = b; i < e; ++i)
      one.push_back({ctx->logits(int64_t(i - b)), ctx->logits(int64_t(i - b)) + ctx->n_vocab()});
  };
  decode_prompt(*ctx, toks, all);
  EXPECT_EQ(calls, 1u);
  ctx->reset();
  all.n_batch = 4;  // chunks of 4, 4, 3
  all.on_chunk = [&](size_t b, size_t e) {
    ++calls;
    EXPECT_EQ(b % 4, 0u);
    EXPECT_EQ(e, std::min(toks.size(), b + 4));
    for (size_t i = b; i < e; ++i)
      chunked.push_back({ctx->logits(int64_t(i - b)), ctx->logits(int64_t(i - b)) + ctx->n_vocab()});
  };
  decode_prompt(*ctx, toks, all);
  EXPECT_EQ(calls, 4u);
  ASSERT_EQ(chunked.size(), toks.size());
  for (size_t i = 0; i < toks.size(); ++i) expect_close(chunked[i], one[i]);
  EXPECT_EQ(ctx->seq_pos_max(0), int32_t(toks.size()) - 1);

  // Last: only the last token's logits, after the last chunk.
  ctx->reset();
  PromptOptions last;
  last.n_batch = 4;
  decode_prompt(*ctx, toks, last);
  EXPECT_EQ(ctx->n_outputs(), 1);
  expect_close(gen_last_logits(*ctx), one.back());
}

TEST_F(Generation, BadPromptsAreClearErrors) {
  EXPECT_THROW(decode_prompt(*ctx, std::vector<int32_t>{}), Error);
  EXPECT_THROW(decode_prompt(*ctx, std::vector<int32_t>{1, 99999}), Error);
  Sequence seq(*ctx);
  Sampler s(greedy(), int32_t(ctx->n_vocab()));
  // Nothing decoded yet: no logits to sample from.
  EXPECT_THROW(generate(seq, s, *vocab, StopRules{}), Error);
}

TEST_F(Generation, StopsOnEndOfGenerationWithoutEmittingIt) {
  Sequence seq(*ctx);
  seq.decode(prompt);
  Sampler s(greedy(1000), int32_t(ctx->n_vocab()));
  int calls = 0;
  const GenerateResult r =
      generate(seq, s, *vocab, StopRules{}, [&](int32_t, std::string_view) { return ++calls, true; });
  EXPECT_EQ(r.reason, FinishReason::Stop);
  EXPECT_EQ(r.n_generated, 0);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(seq.size(), int64_t(prompt.size()));
  EXPECT_STREQ(finish_reason_name(r.reason), "stop");

  // ignore_eog (the server's ignore_eos): the same token is emitted and the loop goes on to n_predict.
  ctx->reset();
  Sequence seq2(*ctx);
  seq2.decode(prompt);
  Sampler s2(greedy(1000), int32_t(ctx->n_vocab()));
  StopRules rules;
  rules.n_predict = 3;
  rules.ignore_eog = true;
  std::vector<int32_t> got;
  const GenerateResult r2 = generate(seq2, s2, *vocab, rules, [&](int32_t t, std::string_view) {
    got.push_back(t);
    return true;
  });
  EXPECT_EQ(r2.reason, FinishReason::Length);
  ASSERT_EQ(got.size(), 3u);
  for (int32_t t : got) EXPECT_TRUE(vocab->is_eog(t));
}

TEST_F(Generation, StopsAfterNPredictTokens) {
  Sequence seq(*ctx);
  seq.decode(prompt);
  Sampler s(greedy(kBan), int32_t(ctx->n_vocab()));
  StopRules rules;
  rules.n_predict = 5;
  std::vector<int32_t> got;
  const GenerateResult r = generate(seq, s, *vocab, rules, [&](int32_t t, std::string_view) {
    got.push_back(t);
    return true;
  });
  EXPECT_EQ(r.reason, FinishReason::Length);
  EXPECT_EQ(r.n_generated, 5);
  EXPECT_EQ(got.size(), 5u);
  // Every emitted token but the last was decoded into the sequence.
  ASSERT_EQ(seq.size(), int64_t(prompt.size()) + 4);
  EXPECT_EQ(std::vector<int32_t>(seq.tokens().begin() + long(prompt.size()), seq.tokens().end()),
            std::vector<int32_t>(got.begin(), got.end() - 1));
  EXPECT_EQ(ctx->seq_pos_max(0), int32_t(seq.size()) - 1);

  // n_predict = 0: nothing is sampled.
  int calls = 0;
  rules.n_predict = 0;
  const GenerateResult r0 = generate(seq, s, *vocab, rules, [&](int32_t, std::string_view) { return ++calls, true; });
  EXPECT_EQ(r0.reason, FinishReason::Length);
  EXPECT_EQ(r0.n_generated, 0);
  EXPECT_EQ(calls, 0);
}

TEST_F(Generation, StopsWhenTheContextIsFull) {
  auto small = make_context(16);
  Sequence seq(*small);
  seq.decode(prompt);
  Sampler s(greedy(kBan), int32_t(small->n_vocab()));
  const GenerateResult r = generate(seq, s, *vocab, StopRules{});
  EXPECT_EQ(r.reason, FinishReason::ContextFull);
  // The cache fills up; the token sampled from the last cell's logits is emitted, not decoded.
  EXPECT_EQ(seq.size(), 16);
  EXPECT_EQ(small->seq_pos_max(0), 15);
  EXPECT_EQ(r.n_generated, 16 - int64_t(prompt.size()) + 1);

  // A rule's n_ctx below the context's (the server keeps one cell per slot free).
  small->reset();
  Sequence seq2(*small);
  seq2.decode(prompt);
  StopRules rules;
  rules.n_ctx = 10;
  const GenerateResult r2 = generate(seq2, s, *vocab, rules);
  EXPECT_EQ(r2.reason, FinishReason::ContextFull);
  EXPECT_EQ(seq2.size(), 10);
  EXPECT_STREQ(finish_reason_name(r2.reason), "context-full");
}

TEST_F(Generation, CallbackSeesTokensInOrderAndCanStop) {
  std::vector<int32_t> all;
  {
    Sequence seq(*ctx);
    seq.decode(prompt);
    Sampler s(greedy(kBan), int32_t(ctx->n_vocab()));
    StopRules rules;
    rules.n_predict = 6;
    generate(seq, s, *vocab, rules, [&](int32_t t, std::string_view piece) {
      EXPECT_EQ(piece, vocab->token_to_piece(t, false));
      all.push_back(t);
      return true;
    });
  }
  ASSERT_EQ(all.size(), 6u);
  ctx->reset();
  Sequence seq(*ctx);
  seq.decode(prompt);
  Sampler s(greedy(kBan), int32_t(ctx->n_vocab()));
  std::vector<int32_t> got;
  const GenerateResult r = generate(seq, s, *vocab, StopRules{}, [&](int32_t t, std::string_view) {
    got.push_back(t);
    return got.size() < 3;  // stop after the third token
  });
  EXPECT_EQ(r.reason, FinishReason::Requested);
  EXPECT_EQ(r.n_generated, 3);
  EXPECT_EQ(got, std::vector<int32_t>(all.begin(), all.begin() + 3));
  EXPECT_EQ(seq.size(), int64_t(prompt.size()) + 2);
}

TEST_F(Generation, PrefixReuseDecodesOnlyTheSuffixAndMatchesAFreshDecode) {
  std::vector<int32_t> a, b;
  for (int i = 0; i < 12; ++i) a.push_back(int32_t(3 + (i * 37) % 500));
  b.assign(a.begin(), a.begin() + 7);
  for (int i = 0; i < 5; ++i) b.push_back(int32_t(5 + (i * 53) % 500));

  auto fresh = make_context(64);
  decode_prompt(*fresh, b);
  const std::vector<float> want = gen_last_logits(*fresh);

  Sequence seq(*ctx);
  seq.decode(a);
  EXPECT_EQ(seq.tokens(), a);
  const size_t kept = seq.reuse_prefix(b);
  EXPECT_EQ(kept, 7u);
  EXPECT_EQ(ctx->seq_pos_max(0), 6);
  EXPECT_EQ(ctx->kv_cache().n_free(), ctx->n_ctx() - 7);
  seq.decode(std::span<const int32_t>(b).subspan(kept));
  EXPECT_EQ(seq.tokens(), b);
  EXPECT_EQ(ctx->kv_cache().n_free(), ctx->n_ctx() - int64_t(b.size()));
  expect_close(gen_last_logits(*ctx), want);

  // The same prompt again: everything but the last token is kept (its logits are needed).
  EXPECT_EQ(seq.reuse_prefix(b), b.size() - 1);
  seq.decode(std::span<const int32_t>(b).subspan(b.size() - 1));
  expect_close(gen_last_logits(*ctx), want);
  EXPECT_EQ(common_prefix(a, b), 7u);
}

TEST_F(Generation, PromptChunksForABatchOfSeveralSequences) {
  // The server's way: sequences 1 and 2 read their prompts in one batch, 5 tokens at most.
  Sequence s1(*ctx, 1), s2(*ctx, 2);
  Batch batch;
  EXPECT_EQ(s1.add_prompt_chunk(batch, prompt, 2), 2u);
  EXPECT_EQ(s2.add_prompt_chunk(batch, prompt, 5 - batch.size()), 3u);
  EXPECT_EQ(batch.seq, (std::vector<int32_t>{1, 1, 2, 2, 2}));
  EXPECT_EQ(batch.pos, (std::vector<int32_t>{0, 1, 0, 1, 2}));
  EXPECT_EQ(batch.logits[4], prompt.size() == 3u ? 1 : 0);
  ctx->decode(batch);
  batch.clear();
  EXPECT_EQ(s1.add_prompt_chunk(batch, prompt, 100), prompt.size() - 2);
  EXPECT_EQ(batch.logits.back(), 1);  // the prompt's last token
  EXPECT_EQ(batch.pos.front(), 2);
  ctx->decode(batch);
  EXPECT_EQ(s1.tokens(), prompt);
  EXPECT_EQ(s1.add_prompt_chunk(batch, prompt, 100), 0u);  // read

  auto fresh = make_context(64);
  decode_prompt(*fresh, prompt);
  expect_close(gen_last_logits(*ctx), gen_last_logits(*fresh));
  s1.clear();
  EXPECT_EQ(ctx->seq_pos_max(1), -1);
  EXPECT_EQ(s1.size(), 0);
}

TEST_F(Generation, StopRulesAsTheServerAsksThem) {
  StopRules r;
  r.n_predict = 4;
  r.n_ctx = 10;
  EXPECT_FALSE(r.before_sample(0));
  EXPECT_FALSE(r.after_token(3, 9));
  EXPECT_EQ(r.after_token(4, 5), FinishReason::Length);
  EXPECT_EQ(r.after_token(1, 10), FinishReason::ContextFull);
  EXPECT_EQ(r.after_token(4, 10), FinishReason::ContextFull);  // a full context wins
  r.n_predict = 0;
  EXPECT_EQ(r.before_sample(0), FinishReason::Length);
  r.n_predict = -1;
  EXPECT_FALSE(r.after_token(1000, 9));
  EXPECT_TRUE(r.ends_generation(*vocab, vocab->eos()));
  r.ignore_eog = true;
  EXPECT_FALSE(r.ends_generation(*vocab, vocab->eos()));
}

TEST_F(Generation, ChatStateEvaluatesOnlyTheNewTurn) {
  ChatState chat(*ctx, greedy(kBan));
  EXPECT_EQ(chat.prompt(prompt), int64_t(prompt.size()));
  StopRules rules;
  rules.n_predict = 4;
  std::vector<int32_t> reply;
  chat.reply(*vocab, rules, [&](int32_t t, std::string_view) {
    reply.push_back(t);
    return true;
  });
  ASSERT_EQ(reply.size(), 4u);
  // Turn 2: the conversation so far plus three new tokens. The last reply
  // token was never decoded, so it is evaluated with the new ones.
  std::vector<int32_t> conv = prompt;
  conv.insert(conv.end(), reply.begin(), reply.end());
  const std::vector<int32_t> turn2 = {7, 8, 9};
  conv.insert(conv.end(), turn2.begin(), turn2.end());
  EXPECT_EQ(chat.prompt(conv), 4);
  EXPECT_EQ(chat.sequence().tokens(), conv);
  auto fresh = make_context(64);
  decode_prompt(*fresh, conv);
  expect_close(gen_last_logits(*ctx), gen_last_logits(*fresh));

  chat.clear();
  EXPECT_EQ(chat.sequence().size(), 0);
  EXPECT_EQ(ctx->seq_pos_max(0), -1);
  EXPECT_THROW(chat.prompt(std::vector<int32_t>{}), Error);
}

}  // namespace
}  // namespace opal
