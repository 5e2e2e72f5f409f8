// Each filter keeps exactly the set that follows from its definition, tested
// through the public Sampler (the support of the post-sampling distribution)
// and, for the large-set code paths, through the step kernels directly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "sampling/sampler.h"
#include "sampling/sampler_steps.h"
#include "sampling_test_util.h"

using namespace opal;
using opal::test::plain_params;
using opal::test::post_support;

namespace {

std::vector<float> logs_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::set<int32_t> support_after(const SamplerParams& p, const std::vector<float>& logits) {
  Sampler s(p, static_cast<int32_t>(logits.size()));
  s.sample(logits.data());
  return post_support(s);
}

std::vector<Candidate> candidates(const std::vector<float>& logits) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({static_cast<int32_t>(i), logits[i], 0});
  return c;
}

}  // namespace

TEST(SamplerFilters, TopKKeepsTheKHighest) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.5f, 0.7f, 1.9f, -0.2f};
  SamplerParams p = plain_params();
  p.top_k = 3;
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{3, 1, 5}));
  p.top_k = 1;
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{3}));
  p.top_k = 0;  // off
  EXPECT_EQ(support_after(p, logits).size(), logits.size());
  p.top_k = -5;  // off
  EXPECT_EQ(support_after(p, logits).size(), logits.size());
  p.top_k = 100;  // more than the vocabulary: all
  EXPECT_EQ(support_after(p, logits).size(), logits.size());
}

TEST(SamplerFilters, TopKOnALargeVocabularyMatchesASort) {
  const auto logits = test::random_logits(150000, 7);
  for (int32_t k : {1, 40, 500, 40000}) {
    SamplerParams p = plain_params();
    p.top_k = k;
    EXPECT_EQ(support_after(p, logits), test::top_k_ref(logits, k)) << "k=" << k;
  }
}

TEST(SamplerFilters, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (shuffled ids).
  const auto logits = logs_of({0.0625, 0.25, 0.5, 0.0625, 0.125});
  SamplerParams p = plain_params();
  p.top_p = 0.4f;  // 0.5 >= 0.4
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{2}));
  p.top_p = 0.6f;  // 0.5 < 0.6 <= 0.75
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{2, 1}));
  p.top_p = 0.8f;  // 0.75 < 0.8 <= 0.875
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{2, 1, 4}));
  p.top_p = 0.0f;  // the first token always reaches 0
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{2}));
  p.top_p = 1.0f;  // off
  EXPECT_EQ(support_after(p, logits).size(), 5u);
  p.top_p = 0.4f;
  p.min_keep = 3;  // min_keep wins over p
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{2, 1, 4}));
}

// Large unsorted sets take the "best 256 first" path, and fall back to a full
// sort when the nucleus is larger than that; both must give the exact prefix.
TEST(SamplerFilters, TopPOnLargeSetsIsTheSortedPrefix) {
  struct Case {
    size_t n;
    float scale;
  };
  // A small nucleus; one of thousands; one of ~100k (several sort chunks).
  for (const Case c : {Case{5000, 4.0f}, Case{5000, 0.05f}, Case{150000, 0.05f}}) {
    const float scale = c.scale;
    const auto logits = test::random_logits(c.n, 11, scale);
    const auto probs = test::softmax_ref(logits);
    for (float top_p : {0.5f, 0.9f}) {
      SamplerParams p = plain_params();
      p.top_p = top_p;
      const auto kept = support_after(p, logits);
      // The kept set is a prefix of the descending order...
      std::vector<int32_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      const std::set<int32_t> prefix(order.begin(), order.begin() + kept.size());
      ASSERT_EQ(kept, prefix) << "scale " << scale << " top_p " << top_p;
      // ...whose mass reaches p, while the prefix one shorter does not.
      double mass = 0;
      for (int32_t t : kept) mass += probs[t];
      const double last = probs[order[kept.size() - 1]];
      EXPECT_GE(mass, top_p - 1e-5);
      EXPECT_LT(mass - last, top_p + 1e-5);
      if (scale < 1.0f) {
        EXPECT_GT(kept.size(), 256u);
      }
    }
  }
}

TEST(SamplerFilters, MinPIsRelativeToTheMostLikelyToken) {
  // p_i / p_max = e^-i: tokens pass min_p when e^-i >= min_p.
  const std::vector<float> logits = {-3.0f, 0.0f, -2.0f, -1.0f, -4.0f};
  SamplerParams p = plain_params();
  p.min_p = 0.2f;  // e^-1 = 0.37 passes, e^-2 = 0.135 does not
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 3}));
  p.min_p = 0.1f;  // e^-2 passes, e^-3 = 0.05 does not
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 3, 2}));
  p.min_p = 1.0f;  // only the top
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1}));
  p.min_p = 0.0f;  // off
  EXPECT_EQ(support_after(p, logits).size(), 5u);
  p.min_p = 0.2f;
  p.min_keep = 4;
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 3, 2, 0}));
}

TEST(SamplerFilters, MinPKeepsTheOrderOfAnUnsortedSet) {
  std::vector<Candidate> c = candidates({-3.0f, 0.0f, -2.0f, -1.0f, -0.5f});
  CandidateSet set{c.data(), c.size(), false};
  apply_min_p(set, 0.2f, 0);
  ASSERT_EQ(set.size, 3u);
  EXPECT_EQ(set.data[0].id, 1);
  EXPECT_EQ(set.data[1].id, 3);
  EXPECT_EQ(set.data[2].id, 4);
  EXPECT_FALSE(set.sorted);
}

// Locally typical sampling ranks by |-ln p - H|. With p = (.4, .3, .2, .1),
// H = 1.2799 and the scores are .364, .076, .330, 1.023: typicality order is
// tokens 1, 2, 0, 3, so a small typical_p drops the most likely token.
TEST(SamplerFilters, TypicalKeepsTheMostTypicalTokens) {
  const auto logits = logs_of({0.4, 0.3, 0.2, 0.1});
  SamplerParams p = plain_params();
  p.typical_p = 0.45f;  // .3 + .2 = .5 > .45
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 2}));
  p.typical_p = 0.55f;  // .5 <= .55 < .9
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 2, 0}));
  p.typical_p = 0.25f;  // .3 > .25
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1}));
  p.min_keep = 2;
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{1, 2}));
  p.typical_p = 1.0f;
  EXPECT_EQ(support_after(p, logits).size(), 4u);
}

TEST(SamplerFilters, TopNSigmaMasksBelowMaxMinusNSigma) {
  const std::vector<float> logits = {10.0f, 9.0f, 7.5f, 2.0f, 1.0f, 0.0f, 0.5f, -1.0f};
  double mean = 0, var = 0;
  for (float l : logits) mean += l;
  mean /= logits.size();
  for (float l : logits) var += (l - mean) * (l - mean);
  const double sigma = std::sqrt(var / logits.size());  // population stddev, 4.16
  // Cutoffs 8.75, 7.51 (just above 7.5), 7.09, 3.76, 2.10 (just above 2).
  for (float n : {0.3f, 0.6f, 0.7f, 1.5f, 1.9f}) {
    std::set<int32_t> expected;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] >= 10.0 - n * sigma) expected.insert(static_cast<int32_t>(i));
    }
    SamplerParams p = plain_params();
    p.top_n_sigma = n;
    EXPECT_EQ(support_after(p, logits), expected) << "n=" << n;
  }
  SamplerParams p = plain_params();
  p.top_n_sigma = 0.3f;  // cutoff 10 - 1.25: only 10 and 9 survive
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{0, 1}));
  p.top_n_sigma = -1.0f;  // off
  EXPECT_EQ(support_after(p, logits).size(), logits.size());
}

TEST(SamplerFilters, XtcDropsTheTopChoicesButTheLeastLikelyOfThem) {
  // p = .5, .3, .15, .05: three tokens >= 0.1, all but the last of them go.
  const auto logits = logs_of({0.3, 0.05, 0.5, 0.15});
  SamplerParams p = plain_params();
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.1f;
  EXPECT_EQ(support_after(p, logits), (std::set<int32_t>{3, 1}));
  p.xtc_threshold = 0.4f;  // only one token above: nothing to exclude
  EXPECT_EQ(support_after(p, logits).size(), 4u);
  p.xtc_threshold = 0.6f;  // > 0.5: off
  EXPECT_EQ(support_after(p, logits).size(), 4u);
  p.xtc_threshold = 0.1f;
  p.xtc_probability = 0.0f;  // off
  EXPECT_EQ(support_after(p, logits).size(), 4u);
  p.xtc_probability = 1.0f;
  p.min_keep = 3;  // removing two would leave 2 < min_keep
  EXPECT_EQ(support_after(p, logits).size(), 4u);
}

TEST(SamplerFilters, TemperatureScalesTheLogits) {
  const std::vector<float> logits = {1.0f, 2.5f, -0.5f, 0.0f, 3.0f};
  for (float temp : {0.5f, 1.0f, 2.0f}) {
    SamplerParams p = plain_params();
    p.temp = temp;
    Sampler s(p, 5);
    s.sample(logits.data());
    const auto expected = test::softmax_ref(logits, temp);
    for (const auto& tp : s.top_probs(5, ProbSource::post_sampling)) {
      EXPECT_NEAR(tp.prob, expected[tp.token], 1e-6) << "temp " << temp << " token " << tp.token;
      EXPECT_NEAR(tp.logprob, std::log(expected[tp.token]), 1e-5);
    }
  }
}

TEST(SamplerFilters, KernelsKeepOrderFlagsHonest) {
  // top_k leaves a sorted set; typical leaves typicality order (not sorted).
  const auto logits = test::random_logits(3000, 3);
  std::vector<Candidate> c = candidates(logits);
  StepScratch scratch;
  CandidateSet set{c.data(), c.size(), false};
  apply_top_k(set, 100, scratch);
  ASSERT_TRUE(set.sorted);
  for (size_t i = 1; i < set.size; ++i) EXPECT_TRUE(ranks_before(set.data[i - 1], set.data[i]));
  apply_typical(set, 0.5f, 1, scratch);
  EXPECT_FALSE(set.sorted);
  EXPECT_GE(set.size, 1u);
}

// The bounded-heap selection and the nth_element path must both return the
// exact k best, ties broken by lower id, on streams built to trip them up.
TEST(SamplerFilters, TopKSelectionIsExactOnAdversarialStreams) {
  std::vector<std::vector<float>> streams;
  std::vector<float> ascending(20000), descending(20000), ties(20000), equal(20000, 1.0f);
  for (size_t i = 0; i < ascending.size(); ++i) {
    ascending[i] = 0.001f * static_cast<float>(i);  // every element just beats the heap's worst
    descending[i] = -ascending[i];
    ties[i] = static_cast<float>((i * 7919) % 13);  // many equal logits
  }
  for (const auto* v : {&ascending, &descending, &ties, &equal}) {
    for (int32_t k : {1, 40, 2500, 19999}) {
      std::vector<Candidate> c = candidates(*v);
      std::vector<Candidate> ref = c;
      std::sort(ref.begin(), ref.end(), ranks_before);
      StepScratch scratch;
      CandidateSet set{c.data(), c.size(), false};
      apply_top_k(set, k, scratch);
      ASSERT_EQ(set.size, static_cast<size_t>(k));
      for (int32_t i = 0; i < k; ++i) {
        ASSERT_EQ(set.data[i].id, ref[i].id) << "k=" << k << " rank " << i;
      }
    }
  }
}

// The block-skipping selection over a dense logit array gives select_top's k
// and order exactly: ascending, descending, tied and equal streams, -inf and
// NaN logits, lengths that end mid-block, k from 1 to n.
TEST(SamplerFilters, DenseTopKSelectionEqualsTheHeapSelection) {
  std::vector<std::vector<float>> streams;
  for (size_t n : {1, 63, 64, 65, 1000, 20011}) {
    std::vector<float> asc(n), desc(n), ties(n), equal(n, 1.0f), odd(n);
    for (size_t i = 0; i < n; ++i) {
      asc[i] = 0.001f * static_cast<float>(i);
      desc[i] = -asc[i];
      ties[i] = static_cast<float>((i * 7919) % 13);
      odd[i] = i % 5 == 0 ? -std::numeric_limits<float>::infinity() : (i % 11 == 0 ? std::nanf("") : ties[i]);
    }
    for (auto* v : {&asc, &desc, &ties, &equal, &odd}) streams.push_back(*v);
    streams.push_back(opal::test::random_logits(n, 7));
  }
  for (const auto& v : streams) {
    const size_t n = v.size();
    for (size_t k : {size_t(1), size_t(40), n / 2, n}) {
      if (k == 0 || k > n) continue;
      std::vector<Candidate> heap(k), dense(k);
      select_top(n, k, heap.data(), [&v](size_t i) { return Candidate{static_cast<int32_t>(i), v[i], 0.0f}; });
      select_top_dense(v.data(), n, k, dense.data());
      for (size_t i = 0; i < k; ++i) {
        ASSERT_EQ(dense[i].id, heap[i].id) << "n=" << n << " k=" << k << " rank " << i;
      }
    }
  }
}
