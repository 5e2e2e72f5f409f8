// Internal to opal_sampling (tests include it too): the candidate list and the
// step kernels the Sampler chains. Each step reads and shrinks/reorders a
// CandidateSet in place, with llama.cpp's semantics (see sampler_steps.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace opal {

enum class SamplerStep { penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature };

// Canonical/alternative names -> steps; throws opal::Error on unknown names.
std::vector<SamplerStep> steps_from_names(const std::vector<std::string>& order);
const char* step_name(SamplerStep step);

struct Candidate {
  int32_t id;
  float logit;
  float p;  // valid after a softmax
};

// Ranking used everywhere: higher logit first, ties by lower token id, so that
// every sort and selection gives one deterministic order.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// A view of the live candidates in a buffer the Sampler owns.
struct CandidateSet {
  Candidate* data = nullptr;
  size_t size = 0;
  bool sorted = false;  // data[0..size) is in ranks_before order
};

// Buffers the steps reuse across calls (sized on first use, never shrunk).
struct StepScratch {
  std::vector<Candidate> cand;
  std::vector<float> scores;
  std::vector<int32_t> index;
};

// Selects the k best of n candidates produced by get(i) into out[0..k), best
// first. k <= n. A bounded min-heap: O(n) compares when k << n.
template <typename Get>
void select_top(size_t n, size_t k, Candidate* out, Get get) {
  if (k == 0) return;
  for (size_t i = 0; i < k; ++i) out[i] = get(i);
  // Heap ordered by ranks_before: out[0] is the worst of the k kept so far.
  std::make_heap(out, out + k, ranks_before);
  for (size_t i = k; i < n; ++i) {
    Candidate c = get(i);
    if (ranks_before(c, out[0])) {
      std::pop_heap(out, out + k, ranks_before);
      out[k - 1] = c;
      std::push_heap(out, out + k, ranks_before);
    }
  }
  std::sort_heap(out, out + k, ranks_before);
}

// select_top over a dense logit array (candidate i = {i, logits[i]}), the
// same k in the same order. Blocks of kTopBlock logits whose maximum does not
// exceed the heap's worst are skipped whole: a logit equal to it cannot rank
// before it either (its id is higher than every id seen), and a NaN never
// ranks before anything. Over 150k logits and k = 40 nearly every block is
// skipped after the first few, and the block maximum vectorizes.
inline constexpr size_t kTopBlock = 64;
// The largest of n floats, NaN ignored (-inf when none): eight running maxima,
// independent chains the compiler keeps in one vector register (one chain of
// n dependent compares costs ~3 cycles a float: 110 us over 150k logits).
// m8[u] = max(m8[u], v[i + u]) over i in [0, n8) step 8 (n8 a multiple of 8).
inline void max_lanes8(const float* v, size_t n8, float* m8) {
  for (size_t i = 0; i < n8; i += 8)
    for (size_t u = 0; u < 8; ++u) m8[u] = v[i + u] > m8[u] ? v[i + u] : m8[u];
}
inline float max_of(const float* v, size_t n) {
  float m8[8];
  for (float& m : m8) m = -std::numeric_limits<float>::infinity();
  const size_t n8 = n & ~size_t(7);
  max_lanes8(v, n8, m8);
  for (size_t i = n8; i < n; ++i) m8[0] = v[i] > m8[0] ? v[i] : m8[0];
  float m = m8[0];
  for (size_t u = 1; u < 8; ++u) m = m8[u] > m ? m8[u] : m;
  return m;
}

inline void select_top_dense(const float* logits, size_t n, size_t k, Candidate* out) {
  if (k == 0) return;
  for (size_t i = 0; i < k; ++i) out[i] = Candidate{static_cast<int32_t>(i), logits[i], 0.0f};
  std::make_heap(out, out + k, ranks_before);
  size_t i = k;
  while (i < n) {
    const size_t end = std::min(n, i + kTopBlock);
    if (end - i == kTopBlock) {
      if (!(max_of(logits + i, kTopBlock) > out[0].logit)) {
        i = end;
        continue;
      }
    }
    for (; i < end; ++i) {
      const Candidate c{static_cast<int32_t>(i), logits[i], 0.0f};
      if (ranks_before(c, out[0])) {
        std::pop_heap(out, out + k, ranks_before);
        out[k - 1] = c;
        std::push_heap(out, out + k, ranks_before);
      }
    }
  }
  std::sort_heap(out, out + k, ranks_before);
}

void sort_candidates(CandidateSet& set);
// p = softmax(logit) over the set (max-subtracted, float sum as llama.cpp);
// sorts first when `sort` is set.
void softmax(CandidateSet& set, bool sort);

void apply_top_k(CandidateSet& set, int32_t k, StepScratch& scratch);
void apply_top_p(CandidateSet& set, float p, size_t min_keep, StepScratch& scratch);
void apply_min_p(CandidateSet& set, float p, size_t min_keep);
void apply_typical(CandidateSet& set, float p, size_t min_keep, StepScratch& scratch);
void apply_top_n_sigma(CandidateSet& set, float n);
void apply_xtc(CandidateSet& set, float probability, float threshold, size_t min_keep, std::mt19937& rng);
void apply_temperature(CandidateSet& set, float temp);

// The final draw: softmax over the set, one uniform double from rng, the first
// candidate whose running probability mass reaches it. Leaves p normalized and
// returns the chosen index; max_logit/sum describe the softmax for logprobs.
struct DistResult {
  size_t index = 0;
  float max_logit = 0;
  double sum = 1;
};
DistResult apply_dist(CandidateSet& set, std::mt19937& rng);

}  // namespace opal
