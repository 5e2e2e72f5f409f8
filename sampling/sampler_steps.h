// Internal to opal_sampling (tests include it too): the candidate list and the
// step kernels the Sampler chains. Each step reads and shrinks/reorders a
// CandidateSet in place, with llama.cpp's semantics (see sampler_steps.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
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
