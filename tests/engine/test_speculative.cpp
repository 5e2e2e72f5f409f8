// Speculative decoding (runtime/speculative.h) through generate() and
// ChatState: the n-gram lookup, greedy output equal to decoding without
// speculation (n-gram on stories260K; a draft that is the target quantized
// lower; the target as its own draft, which must accept every draft token),
// sampled output equal too (the target samples every emitted token in order),
// the stop rules inside a verified draft, the draft limits, a draft vocabulary
// that does not match, and recurrent models refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/generation.h"
#include "runtime/ngram_cache.h"
#include "runtime/speculative.h"
#include "support/test_support.h"

namespace opal {
namespace {

TEST(NgramDrafter, ProposesWhatFollowedTheMostRecentEarlierMatch) {
  NgramDrafter d(3, 0);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3};
  // The later of the two matches; past the end, the copy goes on over what it drafted (period 5).
  EXPECT_EQ(d.draft(t, 7), (std::vector<int32_t>{7, 8, 1, 2, 3, 7, 8}));
  EXPECT_EQ(d.draft(t, 2), (std::vector<int32_t>{7, 8}));
  NgramDrafter m2(3, 1);
  EXPECT_EQ(m2.draft(t, 16), (std::vector<int32_t>{7}));
  NgramDrafter d2(2, 0);  // "a b a b": period 2
  EXPECT_EQ(d2.draft(std::vector<int32_t>{5, 6, 5, 6}, 5), (std::vector<int32_t>{5, 6, 5, 6, 5}));
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 16).empty());  // no earlier occurrence
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 3}, 16).empty());           // too short
  EXPECT_TRUE(d.draft(t, 0).empty());
}

TEST(NgramDrafter, MinHitsWaitsForAKeySeenThatOften) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3};    // the key 1 2 3 occurred twice before
  EXPECT_EQ(NgramDrafter(3, 2, 2).draft(t, 16), (std::vector<int32_t>{7, 8}));  // from the most recent
  EXPECT_TRUE(NgramDrafter(3, 2, 3).draft(t, 16).empty());
}

TEST(NgramMapDrafter, DraftsAnMGramThatFollowedTheKeyMinHitsTimes) {
  // Key {1, 2} followed by {3, 4} twice and by {5, 6} once (most recently).
  const std::vector<int32_t> t = {1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 0, 1, 2};
  NgramMapDrafter k1(2, 2, 1, false);
  EXPECT_EQ(k1.draft(t, 16), (std::vector<int32_t>{5, 6}));  // map-k: the most recent m-gram, 1 hit
  NgramMapDrafter k2(2, 2, 2, false);
  EXPECT_TRUE(k2.draft(t, 16).empty());  // {5, 6} followed only once
  NgramMapDrafter v1(2, 2, 1, true);
  EXPECT_EQ(v1.draft(t, 16), (std::vector<int32_t>{3, 4}));  // map-k4v: the most frequent, 2 >= 2 x 1
  NgramMapDrafter v3(2, 2, 3, true);
  EXPECT_TRUE(v3.draft(t, 16).empty());  // {3, 4} has 2 hits < 3
  const std::vector<int32_t> tie = {1, 2, 3, 4, 0, 1, 2, 5, 6, 0, 1, 2};
  EXPECT_TRUE(v1.draft(tie, 16).empty());  // 1 vs 1: no value stands out
  EXPECT_EQ(NgramMapDrafter(2, 0, 1, false).draft(t, 3), (std::vector<int32_t>{5, 6, 0}));  // m 0: n_max
  EXPECT_TRUE(k1.draft(std::vector<int32_t>{1, 2, 3, 4}, 16).empty());                      // no earlier key
  EXPECT_TRUE(k1.draft(t, 0).empty());
}

TEST(NgramModDrafter, FollowsTheHashedChainAndKeepsItsPoolAcrossRequests) {
  NgramModDrafter d(2);
  const std::vector<int32_t> t = {7, 8, 9, 10, 11, 7, 8};
  // 7 8 -> 9 -> (8 9) 10 -> (9 10) 11 -> (10 11) 7 -> (11 7) 8 -> (7 8) 9 ...
  EXPECT_EQ(d.draft(t, 6), (std::vector<int32_t>{9, 10, 11, 7, 8, 9}));
  EXPECT_EQ(d.draft(t, 2), (std::vector<int32_t>{9, 10}));
  d.reset();  // a new request: the pool still knows what follows 7 8
  EXPECT_EQ(d.draft(std::vector<int32_t>{1, 7, 8}, 3), (std::vector<int32_t>{9, 10, 11}));
  NgramModDrafter e(2);
  EXPECT_TRUE(e.draft(std::vector<int32_t>{1, 2, 3, 4}, 8).empty());  // 3 4 never seen followed
}

TEST(SpecParams, BadValuesNameTheFlag) {
  SpecParams p;
  p.n_max = 0;
  EXPECT_THROW(
      {
        try {
          p.validate();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--draft-max"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  p = {};
  p.n_min = 17;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.p_min = 1.5f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.ngram_min_hits = 0;
  EXPECT_THROW(p.validate(), Error);
  try {
    spec_type_from_name("eagle");
    ADD_FAILURE() << "an unknown type was taken";
  } catch (const Error& e) {  // the valid ones are listed
    for (const char* name :
         {"none", "draft", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_EQ(spec_type_from_name("ngram-cache"), SpecType::NgramCache);
  EXPECT_EQ(spec_type_from_name("ngram-simple"), SpecType::NgramSimple);
  EXPECT_EQ(spec_type_from_name("ngram-map-k4v"), SpecType::NgramMapK4v);
  EXPECT_EQ(spec_type_from_name("ngram-mod"), SpecType::NgramMod);
}

struct SpecLoaded {
  std::unique_ptr<Model> model;
  std::optional<Vocab> vocab;
};

struct Speculative : ::testing::Test {
  void SetUp() override { reg = make_registry({}, 1); }
  SpecLoaded load(const std::string& path) {
    SpecLoaded l;
    l.model = Model::load(path, *reg);
    l.vocab.emplace(Vocab::from_gguf(l.model->gguf()));
    return l;
  }
  static std::unique_ptr<Context> context(const Model& m, int64_t n_ctx = 512) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.kv_type = DType::F32;
    return std::make_unique<Context>(m, cp);
  }
  struct Out {
    std::vector<int32_t> tokens;
    GenerateResult result;
  };
  // Generates from `prompt` in a fresh context, with `spec` when given.
  static Out run(const Model& m, const Vocab& v, const std::vector<int32_t>& prompt, const SamplerParams& sp,
                 const StopRules& rules, Speculation* spec, int64_t n_ctx = 512) {
    auto ctx = context(m, n_ctx);
    Sequence seq(*ctx);
    seq.decode(prompt);
    Sampler sampler(sp, int32_t(ctx->n_vocab()));
    for (int32_t t : prompt) sampler.accept(t);
    Out o;
    o.result = generate(
        seq, sampler, v, rules,
        [&](int32_t t, std::string_view) {
          o.tokens.push_back(t);
          return true;
        },
        spec);
    return o;
  }
  static SamplerParams greedy() {
    SamplerParams p;
    p.temp = 0;
    return p;
  }
  std::unique_ptr<Registry> reg;
};

TEST_F(Speculative, NgramGreedyEqualsPlainDecodingOnStories) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time, there was a little girl", true, false);
  StopRules r;
  r.n_predict = 200;
  r.ignore_eog = true;
  const Out plain = run(*s.model, *s.vocab, prompt, greedy(), r, nullptr);
  SpecParams p;
  p.type = SpecType::NgramSimple;
  auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out fast = run(*s.model, *s.vocab, prompt, greedy(), r, spec.get());
  EXPECT_EQ(fast.tokens, plain.tokens);
  EXPECT_EQ(fast.result.reason, plain.result.reason);
  EXPECT_EQ(fast.result.n_generated, 200);
  // Greedy stories repeat themselves: the lookup finds drafts, and some are right.
  EXPECT_GT(spec->stats().n_verify, 0);
  EXPECT_GT(spec->stats().n_accepted, 0);
  EXPECT_LE(spec->stats().n_accepted, spec->stats().n_drafted);
}

// llama.cpp's other draft-free modes: greedy output equal to plain decoding, and drafts accepted on a story
// that repeats itself.
TEST_F(Speculative, NgramMapAndModGreedyEqualPlainDecoding) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time, there was a little girl", true, false);
  StopRules r;
  r.n_predict = 200;
  r.ignore_eog = true;
  const Out plain = run(*s.model, *s.vocab, prompt, greedy(), r, nullptr);
  for (SpecType type : {SpecType::NgramMapK, SpecType::NgramMapK4v, SpecType::NgramMod}) {
    SCOPED_TRACE(spec_type_name(type));
    SpecParams p;
    p.type = type;
    p.ngram_m = type == SpecType::NgramMod ? 0 : 4;
    auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
    const Out fast = run(*s.model, *s.vocab, prompt, greedy(), r, spec.get());
    EXPECT_EQ(fast.tokens, plain.tokens);
    EXPECT_EQ(fast.result.n_generated, 200);
    EXPECT_GT(spec->stats().n_verify, 0);
    EXPECT_GT(spec->stats().n_accepted, 0);
    EXPECT_LE(spec->stats().n_accepted, spec->stats().n_drafted);
  }
}

TEST_F(Speculative, SampledOutputEqualsPlainDecodingToo) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time", true, false);
  SamplerParams sp;
  sp.temp = 0.7f;
  sp.seed = 1234;
  StopRules r;
  r.n_predict = 150;
  r.ignore_eog = true;
  const Out plain = run(*s.model, *s.vocab, prompt, sp, r, nullptr);
  SpecParams p;
  p.type = SpecType::NgramSimple;
  p.ngram_n = 2;
  auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out fast = run(*s.model, *s.vocab, prompt, sp, r, spec.get());
  EXPECT_EQ(fast.tokens, plain.tokens);
  EXPECT_GT(spec->stats().n_drafted, 0);
}

TEST_F(Speculative, StopRulesInsideAVerifiedDraft) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time", true, false);
  SpecParams p;
  p.type = SpecType::NgramSimple;
  p.ngram_n = 1;  // drafts at almost every step
  for (int64_t n : {1, 2, 17, 61}) {
    StopRules r;
    r.n_predict = n;
    r.ignore_eog = true;
    auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
    const Out plain = run(*s.model, *s.vocab, prompt, greedy(), r, nullptr);
    const Out fast = run(*s.model, *s.vocab, prompt, greedy(), r, spec.get());
    EXPECT_EQ(fast.tokens, plain.tokens) << "n_predict " << n;
    EXPECT_EQ(fast.result.reason, FinishReason::Length);
  }
  // A full context: the same tokens, and no draft position past n_ctx (decode would throw).
  StopRules full;
  full.ignore_eog = true;
  auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out plain = run(*s.model, *s.vocab, prompt, greedy(), full, nullptr, 48);
  const Out fast = run(*s.model, *s.vocab, prompt, greedy(), full, spec.get(), 48);
  EXPECT_EQ(fast.tokens, plain.tokens);
  EXPECT_EQ(fast.result.reason, FinishReason::ContextFull);
  // With end of generation on: the same stop, the end token not emitted.
  StopRules eog;
  eog.n_predict = 400;
  const Out plain_eog = run(*s.model, *s.vocab, prompt, greedy(), eog, nullptr);
  auto spec2 = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out fast_eog = run(*s.model, *s.vocab, prompt, greedy(), eog, spec2.get());
  EXPECT_EQ(fast_eog.tokens, plain_eog.tokens);
  EXPECT_EQ(fast_eog.result.reason, plain_eog.result.reason);
}

TEST_F(Speculative, DraftModelQuantizedLowerGivesTheSameGreedyOutput) {
  // Random weights: only a draft that is the target quantized lower agrees with it often.
  SpecLoaded target = load(test::golden_model("tiny-llama-f32"));
  SpecLoaded draft = load(test::golden_model("tiny-llama-q8_0"));
  check_draft_vocab(*target.vocab, *draft.vocab);
  const std::vector<int32_t> prompt = target.vocab->tokenize("The quick brown fox", true, false);
  StopRules r;
  r.n_predict = 64;
  r.ignore_eog = true;
  const Out plain = run(*target.model, *target.vocab, prompt, greedy(), r, nullptr);
  auto dctx = context(*draft.model);
  SpecParams p;
  p.type = SpecType::Draft;
  p.p_min = 0;  // random weights are rarely confident
  p.n_max = 8;
  auto spec = make_speculation(p, dctx.get(), 0, target.model->hparams().n_vocab);
  const Out fast = run(*target.model, *target.vocab, prompt, greedy(), r, spec.get());
  EXPECT_EQ(fast.tokens, plain.tokens);
  EXPECT_GT(spec->stats().n_drafted, 0);
  EXPECT_GT(spec->stats().acceptance(), 0.5) << spec->stats().n_accepted << " / " << spec->stats().n_drafted;
}

TEST_F(Speculative, TheTargetAsItsOwnDraftAcceptsEveryDraftToken) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time", true, false);
  StopRules r;
  r.n_predict = 120;
  r.ignore_eog = true;
  const Out plain = run(*s.model, *s.vocab, prompt, greedy(), r, nullptr);
  auto dctx = context(*s.model);
  SpecParams p;
  p.type = SpecType::Draft;
  p.p_min = 0;
  auto spec = make_speculation(p, dctx.get(), 0, s.model->hparams().n_vocab);
  const Out fast = run(*s.model, *s.vocab, prompt, greedy(), r, spec.get());
  EXPECT_EQ(fast.tokens, plain.tokens);
  EXPECT_GT(spec->stats().n_drafted, 50);
  EXPECT_EQ(spec->stats().n_accepted, spec->stats().n_drafted);
  // Whole drafts of 16 are accepted, so the target decodes far fewer times than it emits tokens.
  EXPECT_LT(spec->stats().n_verify, 120 / 8);
}

TEST_F(Speculative, DraftPMinStopsUnconfidentDrafts) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time", true, false);
  auto dctx = context(*s.model);
  ModelDrafter sure(*dctx, 0, 1.01f, s.model->hparams().n_vocab);  // no token is that probable
  EXPECT_TRUE(sure.draft(prompt, 16).empty());
  ModelDrafter any(*dctx, 0, 0.0f, s.model->hparams().n_vocab);
  EXPECT_EQ(any.draft(prompt, 5).size(), 5u);
}

// Drafters sharing one draft context draft together: the same drafts as each drafting alone, in one
// draft-model decode per draft position for all of them (the catch-up of every sequence in the first).
TEST_F(Speculative, DraftModelsDraftTogetherInOneDecodePerPosition) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const int64_t nv = s.model->hparams().n_vocab;
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Once upon a time", "The dog ran to the park and", "Lily had a big red ball"})
    prompts.push_back(s.vocab->tokenize(p, true, false));
  const std::vector<int> n_max = {5, 3, 6};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto c = context(*s.model);
    alone.push_back(ModelDrafter(*c, 0, 0.0f, nv).draft(prompts[i], n_max[i]));
    ASSERT_EQ(alone.back().size(), size_t(n_max[i]));
  }
  ContextParams cp;
  cp.n_ctx = 1024;
  cp.kv_type = DType::F32;
  cp.n_seq_max = 3;
  Context shared(*s.model, cp);
  std::vector<std::unique_ptr<ModelDrafter>> ds;
  std::vector<ModelDrafter*> ptrs;
  for (int32_t i = 0; i < 3; ++i) {
    ds.push_back(std::make_unique<ModelDrafter>(shared, i, 0.0f, nv));
    ptrs.push_back(ds.back().get());
  }
  std::vector<std::span<const int32_t>> tokens(prompts.begin(), prompts.end());
  int64_t decodes = 0;
  std::vector<std::vector<int32_t>> together = ModelDrafter::draft_together(ptrs, tokens, n_max, &decodes);
  EXPECT_EQ(together, alone);
  EXPECT_EQ(decodes, 6);  // the catch-up and one decode per further position of the longest draft (6)
  // The next step: each sequence took its draft and one more token; the sequences catch up by prefix reuse.
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompts[i].insert(prompts[i].end(), together[i].begin(), together[i].end());
    prompts[i].push_back(together[i].front());
  }
  std::vector<std::vector<int32_t>> alone2;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto c = context(*s.model);
    alone2.push_back(ModelDrafter(*c, 0, 0.0f, nv).draft(prompts[i], 4));
  }
  decodes = 0;
  tokens.assign(prompts.begin(), prompts.end());
  const std::vector<int> four(3, 4);
  EXPECT_EQ(ModelDrafter::draft_together(ptrs, tokens, four, &decodes), alone2);
  EXPECT_EQ(decodes, 4);
  // Speculation::propose_together gives each its draft (limits, draft-min) and drafts the models together.
  std::vector<std::unique_ptr<Speculation>> specs;
  std::vector<Speculation*> sp;
  SpecParams p;
  p.type = SpecType::Draft;
  p.p_min = 0;
  p.n_max = 4;
  for (int32_t i = 0; i < 3; ++i) {
    specs.push_back(make_speculation(p, &shared, i, nv));
    sp.push_back(specs.back().get());
  }
  decodes = 0;
  const std::vector<int64_t> rooms = {4, 2, 0};
  const auto drafts = Speculation::propose_together(sp, tokens, rooms, &decodes);
  ASSERT_EQ(drafts.size(), 3u);
  EXPECT_EQ(drafts[0], alone2[0]);
  EXPECT_EQ(drafts[1], std::vector<int32_t>(alone2[1].begin(), alone2[1].begin() + 2));
  EXPECT_TRUE(drafts[2].empty());
  EXPECT_EQ(decodes, 4);
}

TEST_F(Speculative, ChatWithSpeculationEqualsChatWithout) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  SpecParams p;
  p.type = SpecType::NgramSimple;
  p.ngram_n = 2;
  auto spec = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  std::vector<std::vector<int32_t>> replies[2];
  for (int with = 0; with < 2; ++with) {
    auto ctx = context(*s.model);
    ChatState chat(*ctx, greedy());
    if (with) chat.set_speculation(spec.get());
    std::vector<int32_t> conv = s.vocab->tokenize("Lily and Tom went to the park.", true, false);
    for (int turn = 0; turn < 2; ++turn) {
      chat.prompt(conv);
      std::vector<int32_t> reply;
      StopRules r;
      r.n_predict = 60;
      r.ignore_eog = true;
      chat.reply(*s.vocab, r, [&](int32_t t, std::string_view) {
        reply.push_back(t);
        return true;
      });
      conv.insert(conv.end(), reply.begin(), reply.end());
      const std::vector<int32_t> more = s.vocab->tokenize(" Then they went home.", false, false);
      conv.insert(conv.end(), more.begin(), more.end());
      replies[with].push_back(reply);
    }
  }
  EXPECT_EQ(replies[1], replies[0]);
  EXPECT_GT(spec->stats().n_drafted, 0);
}

TEST_F(Speculative, ADraftWithAnotherVocabularyIsRefusedWithTheReason) {
  SpecLoaded target = load(test::shared_path("models/stories260K.gguf"));
  SpecLoaded other = load(test::shared_path("models/llama-2-tiny-random.gguf"));
  try {
    check_draft_vocab(*target.vocab, *other.vocab);
    FAIL() << "a 512-token and a 32000-token vocabulary were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not match"), std::string::npos) << m;
    EXPECT_NE(m.find("32000"), std::string::npos) << m;
  }
  SpecLoaded qwen = load(test::golden_model("tiny-qwen3-q8_0"));
  EXPECT_THROW(check_draft_vocab(*target.vocab, *qwen.vocab), Error);  // another tokenizer type
}

TEST_F(Speculative, RecurrentModelsAreRefused) {
  SpecLoaded rwkv = load(test::golden_model("tiny-rwkv7-q8_0"));
  auto ctx = context(*rwkv.model, 64);
  try {
    check_speculation_supported(*ctx, "target");
    FAIL() << "RWKV-7 accepted for speculation";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ModelDrafter(*ctx, 0, 0.5f, rwkv.model->hparams().n_vocab), Error);
  SpecParams p;
  p.type = SpecType::NgramSimple;
  auto spec = make_speculation(p, nullptr, 0, rwkv.model->hparams().n_vocab);
  const std::vector<int32_t> prompt = rwkv.vocab->tokenize("Hello", true, false);
  StopRules r;
  r.n_predict = 4;
  EXPECT_THROW(run(*rwkv.model, *rwkv.vocab, prompt, greedy(), r, spec.get(), 64), Error);
}

// --spec-type ngram-cache (runtime/ngram_cache.h): llama.cpp's lookup-cache file, byte for byte.
TEST(NgramCache, FileIsLlamaCppsFormatAndReadsBack) {
  NgramCache c;
  c.add(std::vector<int32_t>{1, 2, 1, 3}, 0, 1, 2);  // {1}: 2, 3; {2}: 1; {1 2}: 1; {2 1}: 3
  ASSERT_NE(c.find(std::vector<int32_t>{1}), nullptr);
  EXPECT_EQ(*c.find(std::vector<int32_t>{1}), (NgramCache::Followers{{2, 1}, {3, 1}}));
  EXPECT_EQ(c.find(std::vector<int32_t>{3}), nullptr);
  const std::string path = test::temp_dir() + "/ngram_cache_format.bin";
  c.save(path);
  // Records sorted by key: 4 key tokens (-1 past the n-gram), the follower count, (token, count) pairs.
  const std::vector<int32_t> want = {1, -1, -1, -1, 2, 2, 1, 3, 1,  //
                                     1, 2,  -1, -1, 1, 1, 1,        //
                                     2, -1, -1, -1, 1, 1, 1,        //
                                     2, 1,  -1, -1, 1, 3, 1};
  const std::vector<uint8_t> bytes = test::read_bytes(path);
  ASSERT_EQ(bytes.size(), want.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0);
  const NgramCache back = NgramCache::load(path, 10);
  EXPECT_EQ(back.size(), 4u);
  EXPECT_EQ(*back.find(std::vector<int32_t>{2, 1}), (NgramCache::Followers{{3, 1}}));
  NgramCache twice = back;
  twice.merge(c);
  EXPECT_EQ(*twice.find(std::vector<int32_t>{1}), (NgramCache::Followers{{2, 2}, {3, 2}}));
}

TEST(NgramCache, CorruptFilesAreRefusedNamingTheFile) {
  const std::string dir = test::temp_dir();
  const auto write = [&](const std::string& name, const std::vector<int32_t>& v, size_t cut = 0) {
    const std::string path = dir + "/" + name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4 - cut));
    return path;
  };
  const std::vector<int32_t> good = {5, 6, -1, -1, 2, 7, 1, 8, 3};
  EXPECT_EQ(NgramCache::load(write("nc_good.bin", good), 100).size(), 1u);
  EXPECT_EQ(NgramCache::load(write("nc_empty.bin", {}), 100).size(), 0u);  // an empty cache
  const std::string cut = write("nc_cut.bin", good, 3);
  test::expect_error([&] { NgramCache::load(cut, 100); }, {cut, "truncated"});
  const std::string half = write("nc_half.bin", {5, 6, -1});
  test::expect_error([&] { NgramCache::load(half, 100); }, {half, "truncated"});
  const std::string zero = write("nc_zero.bin", {5, -1, -1, -1, 0});
  test::expect_error([&] { NgramCache::load(zero, 100); }, {zero, "0 followers"});
  const std::string gap = write("nc_gap.bin", {5, -1, 6, -1, 1, 7, 1});
  test::expect_error([&] { NgramCache::load(gap, 100); }, {gap, "malformed"});
  const std::string count = write("nc_count.bin", {5, -1, -1, -1, 1, 7, -2});
  test::expect_error([&] { NgramCache::load(count, 100); }, {count, "count -2"});
  const std::string vocab = write("nc_vocab.bin", {5, -1, -1, -1, 1, 100, 1});
  test::expect_error([&] { NgramCache::load(vocab, 100); }, {vocab, "token id 100", "vocabulary of 100"});
  test::expect_error([&] { NgramCache::load(dir + "/nc_missing.bin"); }, {"nc_missing.bin", "cannot open"});
}

TEST(NgramCacheDrafter, DraftsFromTheContextThenTheDynamicThenTheStaticCache) {
  // The context: the 4-gram {3 4 1 2} was followed by 3 once (enough for a 4-gram), and so on.
  NgramCacheDrafter ctx({}, {});
  EXPECT_EQ(ctx.draft(std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, 4), (std::vector<int32_t>{3, 4, 1, 2}));
  EXPECT_TRUE(ctx.draft(std::vector<int32_t>{9}, 4).empty());  // a new text: the context is counted again
  // The dynamic cache alone, with its strict thresholds: {7 8} followed by 9 three times is enough, once is not.
  NgramCache often, once;
  often.add(std::vector<int32_t>{7, 8, 9, 7, 8, 9, 7, 8, 9}, 0);
  once.add(std::vector<int32_t>{7, 8, 9}, 0);
  EXPECT_EQ(NgramCacheDrafter({}, often).draft(std::vector<int32_t>{7, 8}, 3), (std::vector<int32_t>{9, 7, 8}));
  EXPECT_TRUE(NgramCacheDrafter({}, once).draft(std::vector<int32_t>{7, 8}, 3).empty());
  // The static cache: the last two tokens' most frequent follower.
  NgramCache st;
  st.add(std::vector<int32_t>{1, 5, 1, 5, 1, 5, 1}, 0, 2, 2);  // {1 5}: 1 x3; {5 1}: 5 x2
  EXPECT_EQ(NgramCacheDrafter(st, {}).draft(std::vector<int32_t>{0, 1, 5}, 3), (std::vector<int32_t>{1, 5, 1}));
  // The static counts weigh the context's candidates: {3 4} was followed by 6, then by 5; the first seen wins
  // a tie, unless the static cache knows 5 after {3 4}.
  NgramCache st2;
  st2.add(std::vector<int32_t>{3, 4, 5}, 0, 2, 2);
  const std::vector<int32_t> t = {3, 4, 6, 3, 4, 5, 3, 4};
  EXPECT_EQ(NgramCacheDrafter({}, {}).draft(t, 1), (std::vector<int32_t>{6}));
  EXPECT_EQ(NgramCacheDrafter(st2, {}).draft(t, 1), (std::vector<int32_t>{5}));
}

TEST(NgramCacheDrafter, ATextCutBackIsSavedWithEachNgramCountedOnce) {
  // A chat whose text was cut back to a prefix and continued (/clear, a context shift): the saved dynamic cache
  // holds the n-grams of everything the run saw, the kept prefix's once, the dropped tail's once.
  const std::string path = test::temp_dir() + "/ngram_cache_cut.bin";
  NgramCacheDrafter d({}, {}, path);
  d.draft(std::vector<int32_t>{1, 2, 3, 4}, 0);
  d.draft(std::vector<int32_t>{1, 2, 5}, 0);  // cut back to {1 2}, then 5
  d.finish();
  NgramCache want;
  want.add(std::vector<int32_t>{1, 2, 3, 4}, 0);
  want.add(std::vector<int32_t>{1, 2, 5}, 2);  // only what followed the kept prefix is new
  const NgramCache got = NgramCache::load(path, 10);
  ASSERT_EQ(got.size(), want.size());
  for (const std::vector<int32_t>& key : {std::vector<int32_t>{1}, {2}, {3}, {1, 2}, {2, 3}, {1, 2, 3}})
    EXPECT_EQ(*got.find(key), *want.find(key)) << "key starting " << key[0] << ", length " << key.size();
  EXPECT_EQ(*got.find(std::vector<int32_t>{1}), (NgramCache::Followers{{2, 1}}));
  EXPECT_EQ(*got.find(std::vector<int32_t>{2}), (NgramCache::Followers{{3, 1}, {5, 1}}));
}

TEST_F(Speculative, NgramCacheGreedyEqualsPlainDecodingAndLearnsFromItsDynamicFile) {
  SpecLoaded s = load(test::shared_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = s.vocab->tokenize("Once upon a time, there was a little girl", true, false);
  StopRules r;
  r.n_predict = 200;
  r.ignore_eog = true;
  const Out plain = run(*s.model, *s.vocab, prompt, greedy(), r, nullptr);
  const std::string lcd = test::temp_dir() + "/ngram_cache_dynamic.bin";
  std::remove(lcd.c_str());
  SpecParams p;
  p.type = SpecType::NgramCache;
  p.lookup_dynamic = lcd;  // not there yet: started empty, written by finish()
  auto first = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out a = run(*s.model, *s.vocab, prompt, greedy(), r, first.get());
  EXPECT_EQ(a.tokens, plain.tokens);
  EXPECT_GT(first->stats().n_accepted, 0);
  EXPECT_NE(first->drafter().finish().find(lcd), std::string::npos);
  const NgramCache written = NgramCache::load(lcd, s.model->hparams().n_vocab);
  EXPECT_GT(written.size(), 100u);
  // A second run reads it: the story is known from its first token on, so more is drafted and accepted.
  auto second = make_speculation(p, nullptr, 0, s.model->hparams().n_vocab);
  const Out b = run(*s.model, *s.vocab, prompt, greedy(), r, second.get());
  EXPECT_EQ(b.tokens, plain.tokens);
  EXPECT_GT(second->stats().n_accepted, first->stats().n_accepted);
  // Token by token along the story, the drafter with the file drafts the right next token more often than one
  // with the context alone.
  NgramCacheDrafter with_file({}, written), context_only({}, {});
  std::vector<int32_t> text = prompt;
  int right_with_file = 0, right_context_only = 0;
  for (int32_t next : plain.tokens) {
    const std::vector<int32_t> f = with_file.draft(text, 1), c = context_only.draft(text, 1);
    right_with_file += !f.empty() && f[0] == next;
    right_context_only += !c.empty() && c[0] == next;
    text.push_back(next);
  }
  EXPECT_GT(right_with_file, right_context_only);
}

}  // namespace
}  // namespace opal
