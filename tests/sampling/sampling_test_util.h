// Helpers for the sampling tests: reference softmax in double precision and
// parameter presets. Expected values in the tests come from these formulas,
// never from the sampler itself.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "sampling/sampler.h"

namespace opal::test {

// Pure softmax sampling: every filter off, temperature 1.
inline SamplerParams plain_params(uint32_t seed = 1234) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

inline std::vector<double> softmax_ref(const std::vector<float>& logits, double temp = 1.0) {
  double m = -INFINITY;
  for (float l : logits) m = std::max(m, static_cast<double>(l) / temp);
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] / temp - m);
  for (double& x : p) x /= sum;
  return p;
}

// Token ids that have a non-zero probability in the distribution the last
// token was drawn from.
inline std::set<int32_t> post_support(const Sampler& s) {
  std::set<int32_t> out;
  for (const auto& tp : s.top_probs(s.n_vocab(), ProbSource::post_sampling)) {
    if (tp.prob > 0.0f) out.insert(tp.token);
  }
  return out;
}

inline std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Indices of the k largest values (all distinct in the tests that use it).
inline std::set<int32_t> top_k_ref(const std::vector<float>& v, size_t k) {
  std::vector<int32_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = static_cast<int32_t>(i);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  return std::set<int32_t>(idx.begin(), idx.begin() + std::min(k, v.size()));
}

}  // namespace opal::test
