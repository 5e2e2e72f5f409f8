// Sampler step kernels, written from llama.cpp's documented semantics
// (src/llama-sampling.cpp):
//
//   top_k        keep the k highest logits (k <= 0: off); result sorted.
//   top_p        softmax, then keep the smallest sorted prefix whose mass is
//                >= p and that has at least min_keep tokens (p >= 1: off).
//   min_p        keep tokens with p_i >= p * p_max, i.e. logit_i >= max + ln p
//                (p <= 0: off); if fewer than min_keep pass, the min_keep best.
//   typical      locally typical sampling: rank by |-ln p_i - H|, keep the
//                prefix whose mass first exceeds p (p >= 1: off).
//   top_n_sigma  mask logits below max - n * stddev(finite logits) (n <= 0: off).
//   xtc          with chance `probability`, drop every token with p >= threshold
//                except the least likely of them (threshold > 0.5: off).
//   temperature  logit /= temp; temp <= 0 keeps only the first highest logit.
//   dist         softmax (max-subtracted, float exponentials, double sum), one
//                std::uniform_real_distribution<double>(0, 1) draw u from the
//                sampler's std::mt19937, pick the first candidate whose running
//                mass reaches u * sum.
//
// Candidates live in one buffer; a step shrinks `size` and may reorder. Sorting
// always uses ranks_before (logit desc, id asc), so ties are deterministic.
#include "sampling/sampler_steps.h"

#include <cmath>
#include <limits>

namespace opal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Above this many candidates, an unsorted top_p first tries the best 256.
constexpr size_t kTopPLargeSet = 1024;
constexpr size_t kTopPFirstGuess = 256;

float max_logit(const CandidateSet& set) {
  if (set.sorted) return set.data[0].logit;
  float m = set.data[0].logit;
  for (size_t i = 1; i < set.size; ++i) m = std::max(m, set.data[i].logit);
  return m;
}

}  // namespace

void sort_candidates(CandidateSet& set) {
  if (!set.sorted) std::sort(set.data, set.data + set.size, ranks_before);
  set.sorted = true;
}

void softmax(CandidateSet& set, bool sort) {
  if (set.size == 0) return;
  if (sort) sort_candidates(set);
  const float max_l = max_logit(set);
  float sum = 0.0f;
  for (size_t i = 0; i < set.size; ++i) {
    float p = std::exp(set.data[i].logit - max_l);
    set.data[i].p = p;
    sum += p;
  }
  for (size_t i = 0; i < set.size; ++i) set.data[i].p /= sum;
}

void apply_top_k(CandidateSet& set, int32_t k, StepScratch& scratch) {
  if (k <= 0 || set.size == 0) return;
  const size_t kk = std::min<size_t>(static_cast<size_t>(k), set.size);
  if (!set.sorted) {
    if (kk * 8 <= set.size) {
      scratch.cand.resize(std::max(scratch.cand.size(), kk));
      const Candidate* src = set.data;
      select_top(set.size, kk, scratch.cand.data(), [src](size_t i) { return src[i]; });
      std::copy(scratch.cand.begin(), scratch.cand.begin() + kk, set.data);
    } else {
      std::nth_element(set.data, set.data + kk - 1, set.data + set.size, ranks_before);
      std::sort(set.data, set.data + kk, ranks_before);
    }
  }
  set.size = kk;
  set.sorted = true;
}

void apply_top_p(CandidateSet& set, float p, size_t min_keep, StepScratch& scratch) {
  if (p >= 1.0f || set.size == 0) return;
  softmax(set, false);
  // Scans a sorted run for the first prefix with mass >= p and >= min_keep
  // tokens; `cum` and `i` carry over between runs.
  float cum = 0.0f;
  size_t i = 0;
  auto scan = [&](const Candidate* sorted, size_t end) {
    for (; i < end; ++i) {
      cum += sorted[i].p;
      if (cum >= p && i + 1 >= min_keep) return true;
    }
    return false;
  };

  if (!set.sorted && set.size > kTopPLargeSet) {
    // The nucleus is usually small: try the best 256, selected into scratch
    // without disturbing the set.
    const size_t guess = kTopPFirstGuess;
    scratch.cand.resize(std::max(scratch.cand.size(), guess));
    const Candidate* src = set.data;
    select_top(set.size, guess, scratch.cand.data(), [src](size_t j) { return src[j]; });
    if (scan(scratch.cand.data(), guess)) {
      std::copy(scratch.cand.begin(), scratch.cand.begin() + i + 1, set.data);
      set.size = i + 1;
      set.sorted = true;
      return;
    }
    // A large nucleus: sort the set chunk by chunk (nth_element, then sort the
    // chunk), scanning as we go, so that only the prefix needed is sorted.
    cum = 0.0f;
    i = 0;
    size_t sorted_end = 0;
    while (sorted_end < set.size) {
      const size_t next = std::min(set.size, std::max<size_t>(sorted_end * 4, 2048));
      if (next < set.size) {
        std::nth_element(set.data + sorted_end, set.data + next, set.data + set.size, ranks_before);
      }
      std::sort(set.data + sorted_end, set.data + next, ranks_before);
      sorted_end = next;
      if (scan(set.data, sorted_end)) {
        set.size = i + 1;
        set.sorted = true;
        return;
      }
    }
    set.sorted = true;  // the whole set is needed
    return;
  }

  sort_candidates(set);
  if (scan(set.data, set.size)) set.size = i + 1;
}

void apply_min_p(CandidateSet& set, float p, size_t min_keep) {
  if (p <= 0.0f || set.size == 0) return;
  const float threshold = max_logit(set) + std::log(p);  // p_i >= p * p_max
  size_t passing = 0;
  for (size_t i = 0; i < set.size; ++i) passing += set.data[i].logit >= threshold;
  if (passing >= min_keep && passing > 0) {
    if (set.sorted) {  // passing tokens are a prefix
      set.size = passing;
      return;
    }
    size_t out = 0;  // stable compaction keeps the current order
    for (size_t i = 0; i < set.size; ++i) {
      if (set.data[i].logit >= threshold) set.data[out++] = set.data[i];
    }
    set.size = out;
    return;
  }
  // Fewer than min_keep pass: keep the min_keep best.
  sort_candidates(set);
  set.size = std::min(set.size, std::max<size_t>(min_keep, 1));
}

void apply_typical(CandidateSet& set, float p, size_t min_keep, StepScratch& scratch) {
  if (p >= 1.0f || set.size == 0) return;
  softmax(set, true);
  float entropy = 0.0f;
  for (size_t i = 0; i < set.size; ++i) {
    const float pi = set.data[i].p;
    if (pi > 0.0f) entropy -= pi * std::log(pi);
  }
  scratch.scores.resize(std::max(scratch.scores.size(), set.size));
  scratch.index.resize(std::max(scratch.index.size(), set.size));
  float* score = scratch.scores.data();
  int32_t* order = scratch.index.data();
  for (size_t i = 0; i < set.size; ++i) {
    const float pi = set.data[i].p;
    score[i] = pi > 0.0f ? std::fabs(-std::log(pi) - entropy) : std::numeric_limits<float>::infinity();
    order[i] = static_cast<int32_t>(i);
  }
  std::sort(order, order + set.size,
            [score](int32_t a, int32_t b) { return score[a] < score[b] || (score[a] == score[b] && a < b); });
  float cum = 0.0f;
  size_t keep = set.size;
  for (size_t i = 0; i < set.size; ++i) {
    cum += set.data[order[i]].p;
    if (cum > p && (min_keep == 0 || i + 1 >= min_keep)) {
      keep = i + 1;
      break;
    }
  }
  scratch.cand.resize(std::max(scratch.cand.size(), keep));
  for (size_t i = 0; i < keep; ++i) scratch.cand[i] = set.data[order[i]];
  std::copy(scratch.cand.begin(), scratch.cand.begin() + keep, set.data);
  set.size = keep;
  set.sorted = false;  // now in typicality order
}

void apply_top_n_sigma(CandidateSet& set, float n) {
  if (n <= 0.0f || set.size <= 1) return;
  float max_l = kNegInf;
  double sum = 0.0;
  size_t finite = 0;
  for (size_t i = 0; i < set.size; ++i) {
    const float l = set.data[i].logit;
    if (l == kNegInf) continue;
    max_l = std::max(max_l, l);
    sum += l;
    ++finite;
  }
  if (finite == 0) return;
  const double mean = sum / static_cast<double>(finite);
  double acc = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    const float l = set.data[i].logit;
    if (l != kNegInf) acc += (l - mean) * (l - mean);
  }
  const float sigma = static_cast<float>(std::sqrt(acc / static_cast<double>(finite)));
  const float cutoff = max_l - n * sigma;
  for (size_t i = 0; i < set.size; ++i) {
    if (set.data[i].logit < cutoff) set.data[i].logit = kNegInf;
  }
  softmax(set, true);
}

void apply_xtc(CandidateSet& set, float probability, float threshold, size_t min_keep, std::mt19937& rng) {
  if (probability <= 0.0f || threshold > 0.5f || set.size < 2) return;
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  if (coin(rng) > probability) return;
  softmax(set, true);
  size_t last_above = 0;  // index of the least likely token with p >= threshold
  for (size_t i = 0; i < set.size; ++i) {
    if (set.data[i].p >= threshold) {
      last_above = i;
    } else {
      break;
    }
  }
  if (last_above > 0 && set.size - last_above >= min_keep) {
    set.data += last_above;
    set.size -= last_above;
  }
}

void apply_temperature(CandidateSet& set, float temp) {
  if (set.size == 0) return;
  if (temp <= 0.0f) {
    size_t best = 0;  // the first highest logit in the current order
    for (size_t i = 1; i < set.size; ++i) {
      if (set.data[i].logit > set.data[best].logit) best = i;
    }
    set.data[0] = set.data[best];
    set.size = 1;
    set.sorted = true;
    return;
  }
  for (size_t i = 0; i < set.size; ++i) set.data[i].logit /= temp;
}

DistResult apply_dist(CandidateSet& set, std::mt19937& rng) {
  DistResult r;
  if (set.size == 1) {
    set.data[0].p = 1.0f;
    r.max_logit = set.data[0].logit;
    r.sum = 1.0;
    return r;
  }
  const float max_l = max_logit(set);
  double sum = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    float p = std::exp(set.data[i].logit - max_l);
    set.data[i].p = p;
    sum += p;
  }
  r.max_logit = max_l;
  r.sum = sum;
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    // Every logit is -inf (all banned) or the input held inf: take the first
    // best candidate rather than produce garbage.
    size_t best = 0;
    for (size_t i = 1; i < set.size; ++i) {
      if (ranks_before(set.data[i], set.data[best])) best = i;
    }
    for (size_t i = 0; i < set.size; ++i) set.data[i].p = i == best ? 1.0f : 0.0f;
    r.index = best;
    r.max_logit = set.data[best].logit;
    r.sum = 1.0;
    return r;
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double target = sum * uniform(rng);
  double running = 0.0;
  bool found = false;
  size_t last_positive = 0;
  for (size_t i = 0; i < set.size; ++i) {
    const float p = set.data[i].p;
    if (p > 0.0f) last_positive = i;
    if (!found) {
      running += p;
      if (running >= target && p > 0.0f) {
        r.index = i;
        found = true;
      }
    }
    set.data[i].p = static_cast<float>(p / sum);
  }
  if (!found) r.index = last_positive;  // rounding left the target just out of reach
  return r;
}

}  // namespace opal
