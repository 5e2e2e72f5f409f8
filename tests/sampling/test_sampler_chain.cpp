// The whole chain: greedy, penalties, seeds, the distribution of draws, the
// effect of the order, logit bias and the reported probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "sampling/sampler.h"
#include "sampling_test_util.h"

using namespace opal;
using opal::test::plain_params;
using opal::test::post_support;

namespace {

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> draw_sequence(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data()));
  return out;
}

// Pearson's chi-square statistic of observed counts against probabilities,
// over the tokens with non-zero probability.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) continue;
    const double e = probs[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

}  // namespace

TEST(SamplerChain, GreedyIsArgmax) {
  for (uint32_t trial = 0; trial < 20; ++trial) {
    const auto logits = test::random_logits(trial % 2 ? 1000 : 151936, trial);
    SamplerParams p;  // llama.cpp defaults...
    p.temp = 0.0f;    // ...with --temp 0
    p.seed = trial;
    Sampler s(p, static_cast<int32_t>(logits.size()));
    EXPECT_EQ(s.sample(logits.data()), argmax(logits)) << "trial " << trial;
    EXPECT_FLOAT_EQ(s.chosen_logprob(ProbSource::post_sampling), 0.0f);
    EXPECT_EQ(post_support(s), std::set<int32_t>{argmax(logits)});
  }
}

TEST(SamplerChain, NonPositiveTemperatureIsGreedyWhateverTheSeed) {
  const std::vector<float> logits = {0.5f, 1.0f, 3.0f, 3.0f, -2.0f};  // tie: the first wins
  for (float temp : {0.0f, -1.0f}) {
    for (uint32_t seed : {1u, 2u, 3u, kRandomSeed}) {
      SamplerParams p = plain_params(seed);
      p.temp = temp;
      Sampler s(p, 5);
      for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits.data()), 2);
    }
  }
  // Greedy still sees the filters that can remove the top token (typical_p).
  SamplerParams p = plain_params();
  p.temp = 0.0f;
  p.typical_p = 0.45f;
  const std::vector<float> typical_logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  Sampler s(p, 4);
  EXPECT_EQ(s.sample(typical_logits.data()), 1);  // typical keeps {1, 2}; the best of them is 1
}

// Repeat penalty divides positive logits and multiplies non-positive ones;
// frequency subtracts count * f, presence subtracts p once; only tokens in the
// last repeat_last_n accepted count.
TEST(SamplerChain, PenaltiesChangeTheRightLogitsByTheRightAmounts) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  for (const auto& order : {default_sampler_order(), std::vector<std::string>{"top_k", "penalties"}}) {
    SamplerParams p = plain_params();
    p.top_k = 6;  // sorts the set first in the second order: exercises the by-id path
    p.order = order;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = 3;
    Sampler s(p, 6);
    for (int32_t t : {0, 5, 1, 1, 4, 1}) s.accept(t);  // window: 1, 4, 1
    s.sample(logits.data());
    std::vector<float> expected = logits;
    expected[1] = -1.0f * 2.0f - (2 * 0.25f + 0.5f);  // negative: multiplied; seen twice
    expected[4] = -2.0f * 2.0f - (1 * 0.25f + 0.5f);  // seen once
    // Tokens 0 and 5 left the window: unchanged.
    const auto want = test::softmax_ref(expected);
    for (const auto& tp : s.top_probs(6, ProbSource::post_sampling)) {
      EXPECT_NEAR(tp.prob, want[tp.token], 1e-6) << "token " << tp.token;
    }
    // The raw distribution is the model's, untouched by penalties.
    const auto raw = test::softmax_ref(logits);
    for (const auto& tp : s.top_probs(6)) EXPECT_NEAR(tp.prob, raw[tp.token], 1e-6);
  }
}

TEST(SamplerChain, RepeatPenaltyDividesPositiveLogits) {
  SamplerParams p = plain_params();
  p.repeat_penalty = 1.5f;
  Sampler s(p, 3);
  s.accept(0);
  const std::vector<float> logits = {3.0f, 1.0f, 0.0f};
  s.sample(logits.data());
  const auto want = test::softmax_ref({2.0f, 1.0f, 0.0f});  // 3 / 1.5
  for (const auto& tp : s.top_probs(3, ProbSource::post_sampling)) EXPECT_NEAR(tp.prob, want[tp.token], 1e-6);
  // Greedy flips to the runner-up once the leader is penalised below it.
  SamplerParams g = plain_params();
  g.temp = 0.0f;
  g.repeat_penalty = 1.1f;
  Sampler sg(g, 2);
  const std::vector<float> close = {5.0f, 4.9f};
  EXPECT_EQ(sg.sample(close.data()), 0);
  sg.accept(0);
  EXPECT_EQ(sg.sample(close.data()), 1);  // 5 / 1.1 = 4.55 < 4.9
}

TEST(SamplerChain, PenaltyWindowModes) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  auto prob_of_0 = [&](int32_t last_n, int accepted_zeros, int accepted_others) {
    SamplerParams p = plain_params();
    p.frequency_penalty = 1.0f;
    p.repeat_last_n = last_n;
    Sampler s(p, 4);
    for (int i = 0; i < accepted_zeros; ++i) s.accept(0);
    for (int i = 0; i < accepted_others; ++i) s.accept(1 + i % 3);
    s.sample(logits.data());
    for (const auto& tp : s.top_probs(4, ProbSource::post_sampling)) {
      if (tp.token == 0) return static_cast<double>(tp.logprob);
    }
    return 0.0;
  };
  // last_n = 0: off. Every logprob is ln(1/4).
  EXPECT_NEAR(prob_of_0(0, 5, 0), std::log(0.25), 1e-6);
  // last_n = -1: every accepted token counts. Five zeros and one each of 1..3:
  // logits 1 - 5 and 1 - 1.
  EXPECT_NEAR(prob_of_0(-1, 5, 3), std::log(test::softmax_ref({-4.0f, 0.0f, 0.0f, 0.0f})[0]), 1e-5);
  // last_n = 4 after five zeros then three others: one zero left in the window.
  const auto want = test::softmax_ref({0.0f, 0.0f, 0.0f, 0.0f});
  EXPECT_NEAR(prob_of_0(4, 5, 3), std::log(want[0]), 1e-6);
  // reset() forgets the history.
  SamplerParams p = plain_params();
  p.presence_penalty = 10.0f;
  Sampler s(p, 4);
  s.accept(0);
  s.reset();
  s.sample(logits.data());
  EXPECT_NEAR(s.top_probs(1, ProbSource::post_sampling)[0].prob, 0.25f, 1e-6);
  // ...including a full window: after reset, a new token counts from zero.
  SamplerParams w = plain_params();
  w.temp = 0.0f;
  w.presence_penalty = 10.0f;
  w.repeat_last_n = 2;
  Sampler sw(w, 4);
  const std::vector<float> prefer0 = {2.0f, 1.0f, 0.0f, 0.0f};
  sw.accept(0);
  sw.accept(0);
  sw.reset();
  EXPECT_EQ(sw.sample(prefer0.data()), 0);
  sw.accept(0);
  EXPECT_EQ(sw.sample(prefer0.data()), 1);  // 0 is in the window again: 2 - 10
  sw.accept(1);
  sw.accept(2);  // window: 1, 2; token 0 has left it
  EXPECT_EQ(sw.sample(prefer0.data()), 0);
}

// XTC's coin is its own std::mt19937 seeded with the seed, one
// uniform_real_distribution<float>(0, 1) draw per call, firing when the draw
// is <= xtc_probability (llama.cpp). With temp 0 the output shows the coin:
// token 1 when it fires (token 0 is excluded), token 0 otherwise.
TEST(SamplerChain, XtcCoinIsSeededAndReproducible) {
  const std::vector<float> logits = {std::log(0.9f), std::log(0.1f)};
  auto run = [&](uint32_t seed) {
    SamplerParams p = plain_params(seed);
    p.temp = 0.0f;
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.05f;
    Sampler s(p, 2);
    return draw_sequence(s, logits, 1000);
  };
  for (uint32_t seed : {1u, 2u}) {
    std::mt19937 ref(seed);
    std::uniform_real_distribution<float> coin(0.0f, 1.0f);
    const auto got = run(seed);
    int fired = 0;
    for (int i = 0; i < 1000; ++i) {
      const bool fires = coin(ref) <= 0.5f;
      ASSERT_EQ(got[i], fires ? 1 : 0) << "seed " << seed << " draw " << i;
      fired += fires;
    }
    EXPECT_GT(fired, 400);  // binomial(1000, .5): 6 sigma either side
    EXPECT_LT(fired, 600);
  }
  EXPECT_NE(run(1), run(2));
}

TEST(SamplerChain, SeedMakesSamplingReproducible) {
  const auto logits = test::random_logits(1000, 5, 1.0f);
  SamplerParams p = plain_params(777);
  Sampler a(p, 1000), b(p, 1000);
  const auto seq_a = draw_sequence(a, logits, 300);
  EXPECT_EQ(seq_a, draw_sequence(b, logits, 300));
  a.reset();  // a fixed seed replays after reset()
  EXPECT_EQ(seq_a, draw_sequence(a, logits, 300));
  p.seed = 778;
  Sampler c(p, 1000);
  EXPECT_NE(seq_a, draw_sequence(c, logits, 300));
  // With the default chain too.
  SamplerParams d;
  d.seed = 99;
  Sampler d1(d, 1000), d2(d, 1000);
  EXPECT_EQ(draw_sequence(d1, logits, 100), draw_sequence(d2, logits, 100));
}

// The documented draw: u = std::uniform_real_distribution<double>(0,1) from a
// std::mt19937 seeded with the seed; the token is the first candidate (in the
// chain's final order: token-id order when nothing sorted it) whose running
// softmax mass reaches u * sum. This is llama.cpp's dist sampler.
TEST(SamplerChain, DrawFollowsLlamaCppsRule) {
  const auto logits = test::random_logits(64, 8, 1.0f);
  const auto probs = test::softmax_ref(logits);
  Sampler s(plain_params(31337), 64);
  std::mt19937 rng(31337);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int disagreements = 0;
  for (int i = 0; i < 2000; ++i) {
    const double u = uniform(rng);
    double mass = 0;
    int32_t expected = 63;
    for (int32_t t = 0; t < 64; ++t) {
      mass += probs[t];
      if (mass >= u) {
        expected = t;
        break;
      }
    }
    // Rounding (float exponentials here, double there) may only matter when u
    // falls within 1e-6 of a boundary.
    disagreements += s.sample(logits.data()) != expected;
  }
  EXPECT_LE(disagreements, 1);
}

TEST(SamplerChain, FrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.3f, 1.2f};
  constexpr int kDraws = 100000;
  {
    Sampler s(plain_params(2024), 8);
    std::vector<int> counts(8);
    for (int i = 0; i < kDraws; ++i) ++counts[s.sample(logits.data())];
    // 7 degrees of freedom: P(chi2 > 29.88) = 1e-4.
    EXPECT_LT(chi_square(counts, test::softmax_ref(logits), kDraws), 29.88);
  }
  {
    // top_k 3 then temperature 0.7: only tokens 4, 7, 0, with softmax(l / 0.7).
    SamplerParams p = plain_params(2025);
    p.top_k = 3;
    p.temp = 0.7f;
    Sampler s(p, 8);
    std::vector<int> counts(8);
    for (int i = 0; i < kDraws; ++i) ++counts[s.sample(logits.data())];
    std::vector<float> top3(8, -INFINITY);
    for (int t : {4, 7, 0}) top3[t] = logits[t];
    const auto want = test::softmax_ref(top3, 0.7);
    for (int t : {1, 2, 3, 5, 6}) EXPECT_EQ(counts[t], 0) << "token " << t;
    // 2 degrees of freedom: P(chi2 > 18.42) = 1e-4.
    EXPECT_LT(chi_square(counts, want, kDraws), 18.42);
  }
}

// With the default order (filters before temperature), top_p sees the
// untempered distribution. Putting temperature first flattens it and top_p
// keeps more: probs at T=1 are .644 .237 .087 .032 (keep 2 for p = .8), at
// T=5 .329 .269 .221 .181 (keep 3).
TEST(SamplerChain, OrderMattersWhereItShould) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplerParams p = plain_params();
  p.top_p = 0.8f;
  p.temp = 5.0f;
  p.order = {"top_p", "temperature"};
  Sampler filters_first(p, 4);
  filters_first.sample(logits.data());
  EXPECT_EQ(post_support(filters_first), (std::set<int32_t>{0, 1}));
  p.order = {"temperature", "top_p"};
  Sampler temp_first(p, 4);
  temp_first.sample(logits.data());
  EXPECT_EQ(post_support(temp_first), (std::set<int32_t>{0, 1, 2}));

  // top_k and a positive temperature commute: same distribution either way.
  SamplerParams k = plain_params();
  k.top_k = 2;
  k.temp = 3.0f;
  k.order = {"top_k", "temperature"};
  Sampler a(k, 4);
  a.sample(logits.data());
  k.order = {"temperature", "top_k"};
  Sampler b(k, 4);
  b.sample(logits.data());
  const auto pa = a.top_probs(4, ProbSource::post_sampling);
  const auto pb = b.top_probs(4, ProbSource::post_sampling);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].token, pb[i].token);
    EXPECT_NEAR(pa[i].prob, pb[i].prob, 1e-6);
  }

  // Without a temperature step, temp is not applied at all (as in llama.cpp).
  SamplerParams none = plain_params();
  none.temp = 0.0f;
  none.order = {"top_k"};
  Sampler n(none, 4);
  n.sample(logits.data());
  EXPECT_EQ(post_support(n).size(), 4u);
}

TEST(SamplerChain, LogitBiasAddsAndBans) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  SamplerParams p = plain_params();
  p.temp = 0.0f;
  p.logit_bias = {{1, -INFINITY}};
  EXPECT_EQ(Sampler(p, 3).sample(logits.data()), 2);
  p.logit_bias = {{0, 2.5f}};
  EXPECT_EQ(Sampler(p, 3).sample(logits.data()), 0);
  // Banned tokens are never drawn.
  SamplerParams q = plain_params(5);
  q.logit_bias = {{1, -INFINITY}, {2, -INFINITY}};
  Sampler s(q, 3);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(logits.data()), 0);
  EXPECT_NE(s.chain_description().find("logit-bias"), std::string::npos);
}

TEST(SamplerChain, ProbabilitiesAreSoftmaxValues) {
  const auto logits = test::random_logits(5000, 21, 2.0f);
  const auto probs = test::softmax_ref(logits);
  SamplerParams p;  // default chain, n_probs as the server would ask
  p.seed = 3;
  p.n_probs = 10;
  Sampler s(p, 5000);
  const int32_t tok = s.sample(logits.data());
  const auto top = s.top_probs(p.n_probs);
  ASSERT_EQ(top.size(), 10u);
  const auto want_ids = test::top_k_ref(logits, 10);
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_TRUE(want_ids.count(top[i].token));
    EXPECT_NEAR(top[i].prob, probs[top[i].token], 1e-6);
    EXPECT_NEAR(top[i].logprob, std::log(probs[top[i].token]), 1e-4);
    if (i > 0) {
      EXPECT_GE(top[i - 1].prob, top[i].prob);
    }
  }
  EXPECT_NEAR(s.chosen_logprob(), std::log(probs[tok]), 1e-4);
  // The post-sampling distribution sums to one and contains the chosen token.
  double sum = 0;
  bool has_chosen = false;
  for (const auto& tp : s.top_probs(5000, ProbSource::post_sampling)) {
    sum += tp.prob;
    if (tp.token == tok) {
      has_chosen = true;
      EXPECT_NEAR(tp.logprob, s.chosen_logprob(ProbSource::post_sampling), 1e-6);
    }
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_TRUE(has_chosen);
  EXPECT_TRUE(s.top_probs(0).empty());
  EXPECT_EQ(s.top_probs(100000).size(), 5000u);
}

// llama.cpp's default chain on a real-sized vocabulary: the token drawn is
// always inside the set the definitions give (top 40, then top_p .95, then
// min_p .05 of the untempered softmax).
TEST(SamplerChain, DefaultChainOnAFullVocabulary) {
  const auto logits = test::random_logits(151936, 4, 2.0f);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  order.resize(40);
  std::vector<float> top40;
  for (int32_t t : order) top40.push_back(logits[t]);
  const auto p40 = test::softmax_ref(top40);
  std::set<int32_t> expected;
  double mass = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (top40[i] < top40[0] + std::log(0.05)) break;  // min_p
    expected.insert(order[i]);
    mass += p40[i];
    if (mass >= 0.95) break;  // top_p
  }
  SamplerParams p;
  p.seed = 8;
  Sampler s(p, static_cast<int32_t>(logits.size()));
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(logits.data());
    EXPECT_TRUE(expected.count(t)) << "token " << t;
    seen.insert(t);
  }
  EXPECT_EQ(post_support(s), expected);
  EXPECT_GT(seen.size(), 1u);
}

TEST(SamplerChain, NanAndAllBannedLogitsStillGiveAValidToken) {
  const std::vector<float> logits = {NAN, 1.0f, NAN, 0.5f};
  Sampler s(plain_params(), 4);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.sample(logits.data());
    EXPECT_TRUE(t == 1 || t == 3);
  }
  SamplerParams p = plain_params();
  p.logit_bias = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
  // A +inf logit that logit_bias bans is banned, not NaN.
  const std::vector<float> inf_logits = {INFINITY, 1.0f, 0.0f};
  SamplerParams ban_inf = plain_params();
  ban_inf.temp = 0.0f;
  ban_inf.logit_bias = {{0, -INFINITY}};
  EXPECT_EQ(Sampler(ban_inf, 3).sample(inf_logits.data()), 1);
  Sampler banned(p, 4);
  const int32_t t = banned.sample(logits.data());
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 4);
}
