// The Sampler: runs logit_bias, then the configured steps in order, then the
// seeded draw (see sampler_steps.cpp for each step and docs/sampling.md).
//
// Layout and state:
//   raw      copy of the caller's logits (NaN -> -inf), for ProbSource::raw.
//   dense    phase 1: while no step has filtered or reordered, the logits
//            stay a plain float array (`raw`, or `work` once bias, penalties
//            or temperature wrote to them), so bias and penalties index it
//            by token id, top_k selects straight from it and greedy is one
//            argmax over it.
//   cand     phase 2: n_vocab {id, logit, p} records; a CandidateSet views a
//            prefix of it that the remaining steps shrink and reorder.
//   window   ring buffer of the last repeat_last_n accepted tokens; counts[t]
//            is t's occurrences in it and `active` lists the tokens with
//            counts > 0 (active_pos[t] is t's slot), so the penalties cost
//            O(distinct tokens in the window), not O(n_vocab).
// All per-call buffers are sized in the constructor or on first use.
#include "sampling/sampler.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/sampler_steps.h"

namespace opal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// llama.cpp's rule for the random seed: std::random_device, or the clock when
// random_device is a deterministic PRNG on this platform.
uint32_t draw_seed(uint32_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device rd;
  if (rd.entropy() == 0) {
    return static_cast<uint32_t>(std::chrono::system_clock::now().time_since_epoch().count());
  }
  return rd();
}

// Steps that never remove the highest logit: with temp <= 0 they cannot change
// the argmax that the temperature step keeps, so the greedy path skips them.
bool keeps_the_max(SamplerStep s) {
  return s == SamplerStep::top_k || s == SamplerStep::top_p || s == SamplerStep::min_p ||
         s == SamplerStep::top_n_sigma || s == SamplerStep::dry;
}

}  // namespace

struct Sampler::State {
  SamplerParams params;
  int32_t n_vocab = 0;
  std::vector<SamplerStep> steps;
  int first_temperature = -1;  // index in steps, -1 if absent
  bool greedy = false;         // temp <= 0 and a temperature step exists
  bool penalties_active = false;

  uint32_t seed_in_use = 0;
  std::mt19937 rng;      // the final draw
  std::mt19937 xtc_rng;  // xtc's own coin, as llama.cpp (same seed)

  // Penalty window.
  std::vector<int32_t> window;  // grows to repeat_last_n, then wraps
  size_t window_head = 0;       // oldest entry once full
  std::vector<int32_t> counts;
  std::vector<int32_t> active;
  std::vector<int32_t> active_pos;

  // Per-call buffers and the last result.
  std::vector<float> raw;
  std::vector<float> work;
  const float* dense = nullptr;  // phase 1 logits (raw or work); null in phase 2
  std::vector<Candidate> cand;
  StepScratch scratch;
  CandidateSet set;  // what the draw saw (post-sampling distribution)
  bool has_sample = false;
  int32_t chosen = -1;
  size_t chosen_index = 0;
  DistResult dist;

  std::unique_ptr<GrammarState> grammar;  // null without a grammar
  int64_t grammar_tokens = 0;             // tokens the grammar advanced over
  bool lazy_waiting = false;              // a lazy grammar whose trigger has not been generated yet
  std::string lazy_text;                  // generated text that may still hold the trigger's start

  mutable bool raw_lse_valid = false;
  mutable double raw_lse = 0;
  mutable std::vector<Candidate> top_buffer;

  void count_in(int32_t t) {
    if (counts[t]++ == 0) {
      active_pos[t] = static_cast<int32_t>(active.size());
      active.push_back(t);
    }
  }
  void count_out(int32_t t) {
    if (--counts[t] == 0) {
      const int32_t pos = active_pos[t];
      const int32_t last = active.back();
      active[pos] = last;
      active_pos[last] = pos;
      active.pop_back();
      active_pos[t] = -1;
    }
  }

  void apply_penalties() {
    if (!penalties_active || active.empty()) return;
    const float rep = params.repeat_penalty;
    const float freq = params.frequency_penalty;
    const float pres = params.presence_penalty;
    auto penalize = [&](Candidate& c, int32_t count) {
      // Divide positive logits, multiply the others, so that a penalty > 1
      // always makes the token less likely (llama.cpp's rule).
      c.logit = c.logit <= 0.0f ? c.logit * rep : c.logit / rep;
      c.logit -= static_cast<float>(count) * freq + pres;
    };
    if (dense) {
      float* w = writable();
      for (int32_t t : active) {
        Candidate c{t, w[t], 0.0f};
        penalize(c, counts[t]);
        w[t] = c.logit;
      }
    } else {
      for (size_t i = 0; i < set.size; ++i) {
        const int32_t count = counts[set.data[i].id];
        if (count > 0) penalize(set.data[i], count);
      }
    }
    set.sorted = false;
  }

  // Phase 1 logits the caller may modify: `raw` is copied to `work` once.
  float* writable() {
    if (dense != work.data()) {
      std::memcpy(work.data(), raw.data(), raw.size() * sizeof(float));
      dense = work.data();
    }
    return work.data();
  }

  // Phase 1 -> phase 2: every token becomes a candidate, in id order.
  void materialize() {
    if (!dense) return;
    Candidate* c = cand.data();
    const float* d = dense;
    for (int32_t i = 0; i < n_vocab; ++i) c[i] = Candidate{i, d[i], 0.0f};
    set = CandidateSet{c, static_cast<size_t>(n_vocab), false};
    dense = nullptr;
  }

  // Steps with a cheaper form on the phase 1 float array. Returns false when
  // the step needs the candidate list.
  bool run_dense_step(SamplerStep step) {
    const size_t n = static_cast<size_t>(n_vocab);
    switch (step) {
      case SamplerStep::top_k: {
        const size_t k = std::min(static_cast<size_t>(params.top_k), n);
        if (k * 8 > n) return false;
        const float* d = dense;
        select_top_dense(d, n, k, cand.data());
        set = CandidateSet{cand.data(), k, true};
        dense = nullptr;
        return true;
      }
      case SamplerStep::temperature: {
        if (params.temp > 0.0f) {
          float* w = writable();
          const float t = params.temp;
          for (size_t i = 0; i < n; ++i) w[i] /= t;
          return true;
        }
        const float* d = dense;
        // The first highest logit: a vectorized max reduction (no NaN here:
        // sample() mapped NaN to -inf; +0 and -0 compare equal), then the first match.
        const float top = max_of(d, n);
        size_t best = 0;
        while (best + 1 < n && d[best] != top) ++best;
        cand[0] = Candidate{static_cast<int32_t>(best), d[best], 0.0f};
        set = CandidateSet{cand.data(), 1, true};
        dense = nullptr;
        return true;
      }
      default: return false;
    }
  }

  // Whether a step changes anything with these parameters (the kernels check
  // again; this keeps phase 1 alive through steps that are off).
  bool step_is_on(SamplerStep step) const {
    switch (step) {
      case SamplerStep::penalties: return penalties_active;
      case SamplerStep::dry: return false;  // DRY is not implemented: off, llama.cpp's default
      case SamplerStep::top_n_sigma: return params.top_n_sigma > 0.0f;
      case SamplerStep::top_k: return params.top_k > 0;
      case SamplerStep::typical_p: return params.typical_p < 1.0f;
      case SamplerStep::top_p: return params.top_p < 1.0f;
      case SamplerStep::min_p: return params.min_p > 0.0f;
      case SamplerStep::xtc: return params.xtc_probability > 0.0f && params.xtc_threshold <= 0.5f;
      case SamplerStep::temperature: return params.temp != 1.0f;
    }
    return false;
  }

  void run_step(SamplerStep step) {
    if (!step_is_on(step)) return;
    if (step == SamplerStep::penalties) {
      apply_penalties();  // works in both phases
      return;
    }
    if (dense) {
      if (run_dense_step(step)) return;
      materialize();
    }
    const size_t min_keep = static_cast<size_t>(params.min_keep);
    switch (step) {
      case SamplerStep::penalties:
      case SamplerStep::dry: return;
      case SamplerStep::top_n_sigma: apply_top_n_sigma(set, params.top_n_sigma); return;
      case SamplerStep::top_k: apply_top_k(set, params.top_k, scratch); return;
      case SamplerStep::typical_p: apply_typical(set, params.typical_p, min_keep, scratch); return;
      case SamplerStep::top_p: apply_top_p(set, params.top_p, min_keep, scratch); return;
      case SamplerStep::min_p: apply_min_p(set, params.min_p, min_keep); return;
      case SamplerStep::xtc: apply_xtc(set, params.xtc_probability, params.xtc_threshold, min_keep, xtc_rng); return;
      case SamplerStep::temperature: apply_temperature(set, params.temp); return;
    }
  }

  void reseed() {
    seed_in_use = draw_seed(params.seed);
    rng.seed(seed_in_use);
    xtc_rng.seed(seed_in_use);
  }

  void check_sampled(const char* what) const {
    if (!has_sample) fail("sampling: {} called before sample()", what);
  }

  double raw_log_sum_exp() const {
    if (raw_lse_valid) return raw_lse;
    float m = kNegInf;
    for (float v : raw) m = std::max(m, v);
    double sum = 0.0;
    if (m != kNegInf && std::isfinite(m)) {
      for (float v : raw) sum += std::exp(static_cast<double>(v) - m);
    }
    raw_lse = sum > 0.0 ? m + std::log(sum) : static_cast<double>(m);
    raw_lse_valid = true;
    return raw_lse;
  }
};

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab) : s_(std::make_unique<State>()) {
  validate(params, n_vocab);
  State& s = *s_;
  s.params = params;
  s.n_vocab = n_vocab;
  s.steps = steps_from_names(params.order);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (s.steps[i] == SamplerStep::temperature) {
      s.first_temperature = static_cast<int>(i);
      break;
    }
  }
  s.greedy = params.temp <= 0.0f && s.first_temperature >= 0;
  bool has_penalty_step = false;
  for (SamplerStep st : s.steps) has_penalty_step |= st == SamplerStep::penalties;
  s.penalties_active =
      has_penalty_step && params.repeat_last_n != 0 &&
      (params.repeat_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f);
  if (s.penalties_active) {
    s.counts.assign(n_vocab, 0);
    s.active_pos.assign(n_vocab, -1);
    if (params.repeat_last_n > 0) {  // bounded window: reserve up front (capped)
      const size_t cap = std::min<size_t>(static_cast<size_t>(params.repeat_last_n), 1u << 16);
      s.window.reserve(cap);
      s.active.reserve(std::min<size_t>(cap, static_cast<size_t>(n_vocab)));
    }
  }
  s.raw.resize(n_vocab);
  s.work.resize(n_vocab);
  s.cand.resize(n_vocab);
  // Step scratch at its largest size now, so that no later call allocates
  // (typical_p, top_p and top_k may each need up to the whole set).
  s.scratch.cand.resize(n_vocab);
  bool has_typical = false;
  for (SamplerStep st : s.steps) has_typical |= st == SamplerStep::typical_p;
  if (has_typical) {
    s.scratch.scores.resize(n_vocab);
    s.scratch.index.resize(n_vocab);
  }
  if (params.grammar || params.grammar_vocab) {
    if (!params.grammar || !params.grammar_vocab) fail("sampling: a grammar needs both the grammar and its vocabulary");
    if (params.grammar_vocab->n_vocab() != n_vocab) {
      fail("sampling: the grammar's vocabulary has {} tokens, the model {}", params.grammar_vocab->n_vocab(), n_vocab);
    }
    s.grammar = std::make_unique<GrammarState>(params.grammar, params.grammar_vocab);
    s.lazy_waiting = !params.grammar_trigger.empty();
  }
  s.reseed();
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

int32_t Sampler::sample(const float* logits) {
  if (logits == nullptr) fail("sampling: sample() got no logits");
  State& s = *s_;
  if (!s.grammar) return sample_chain(logits, false);
  if (s.lazy_waiting) {  // unconstrained until the trigger appears in the generated text
    const int32_t tok = sample_chain(logits, false);
    const std::string& trigger = s.params.grammar_trigger;
    s.lazy_text += s.params.grammar_vocab->piece(tok);
    const size_t at = s.lazy_text.find(trigger);
    if (at == std::string::npos) {
      if (s.lazy_text.size() >= trigger.size()) s.lazy_text.erase(0, s.lazy_text.size() - (trigger.size() - 1));
      return tok;
    }
    s.lazy_waiting = false;
    const std::string from = s.lazy_text.substr(at);
    s.lazy_text.clear();
    if (!s.grammar->accept_text(from))
      throw GrammarDeadEnd(fmt::format("grammar: the text generated with its trigger '{}' does not match it", trigger));
    ++s.grammar_tokens;
    return tok;
  }
  // Greedy: the argmax is the answer whenever the grammar allows it, so the
  // mask is only computed when it does not (exact: the mask only removes tokens).
  int32_t tok = -1;
  if (s.greedy) {
    tok = sample_chain(logits, false);
    if (!s.grammar->allows(tok)) tok = -1;
  }
  if (tok < 0) {
    tok = sample_chain(logits, true);
    if (!s.grammar->allows(tok)) {
      throw GrammarDeadEnd(
          fmt::format("grammar: after {} generated tokens every token that could continue the grammar is banned "
                      "(logit_bias or the sampler left none)",
                      s.grammar_tokens));
    }
  }
  s.grammar->accept(tok);
  ++s.grammar_tokens;
  return tok;
}

void Sampler::reset_grammar() {
  if (s_->grammar) s_->grammar->reset();
  s_->grammar_tokens = 0;
  s_->lazy_waiting = s_->grammar && !s_->params.grammar_trigger.empty();
  s_->lazy_text.clear();
}

bool Sampler::grammar_can_end() const { return !s_->grammar || s_->lazy_waiting || s_->grammar->can_end(); }

int32_t Sampler::sample_chain(const float* logits, bool mask) {
  State& s = *s_;
  const int32_t n = s.n_vocab;
  float* raw = s.raw.data();
  for (int32_t i = 0; i < n; ++i) {
    const float v = logits[i];
    raw[i] = v != v ? kNegInf : v;  // NaN -> -inf
  }
  s.dense = raw;
  s.raw_lse_valid = false;

  if (!s.params.logit_bias.empty()) {
    float* w = s.writable();
    for (const auto& [token, bias] : s.params.logit_bias) {
      const float v = w[token] + bias;
      w[token] = v != v ? kNegInf : v;  // +inf logit + -inf ban: banned
    }
  }
  if (mask) {
    if (s.grammar->mask_logits(s.writable()) == 0) {
      throw GrammarDeadEnd(fmt::format(
          "grammar: no token of the vocabulary can continue the grammar after {} generated tokens", s.grammar_tokens));
    }
  }

  for (size_t i = 0; i < s.steps.size(); ++i) {
    const SamplerStep step = s.steps[i];
    if (s.greedy) {
      const int t = s.first_temperature;
      if (static_cast<int>(i) > t) break;  // one candidate left: the rest are no-ops
      if (static_cast<int>(i) < t && keeps_the_max(step)) continue;
    }
    s.run_step(step);
  }

  s.materialize();
  s.dist = apply_dist(s.set, s.rng);
  s.chosen_index = s.dist.index;
  s.chosen = s.set.data[s.chosen_index].id;
  s.has_sample = true;
  return s.chosen;
}

void Sampler::accept(int32_t token) {
  State& s = *s_;
  if (token < 0 || token >= s.n_vocab) {
    fail("sampling: accepted token {} is outside the vocabulary [0, {})", token, s.n_vocab);
  }
  if (!s.penalties_active) return;
  const int32_t last_n = s.params.repeat_last_n;
  if (last_n < 0) {  // the whole sequence since reset()
    s.count_in(token);
    return;
  }
  if (s.window.size() < static_cast<size_t>(last_n)) {
    s.window.push_back(token);
  } else {
    s.count_out(s.window[s.window_head]);
    s.window[s.window_head] = token;
    s.window_head = (s.window_head + 1) % s.window.size();
  }
  s.count_in(token);
}

void Sampler::reset() {
  State& s = *s_;
  for (int32_t t : s.active) {
    s.counts[t] = 0;
    s.active_pos[t] = -1;
  }
  s.active.clear();
  s.window.clear();
  s.window_head = 0;
  s.has_sample = false;
  s.reseed();
  if (s.grammar) s.grammar->reset();
  s.grammar_tokens = 0;
  s.lazy_waiting = s.grammar && !s.params.grammar_trigger.empty();
  s.lazy_text.clear();
}

std::vector<TokenProb> Sampler::top_probs(int n, ProbSource source) const {
  const State& s = *s_;
  s.check_sampled("top_probs()");
  std::vector<TokenProb> out;
  if (n <= 0) return out;
  if (source == ProbSource::raw) {
    const size_t k = std::min<size_t>(static_cast<size_t>(n), s.raw.size());
    s.top_buffer.resize(std::max(s.top_buffer.size(), k));
    const float* raw = s.raw.data();
    select_top_dense(raw, s.raw.size(), k, s.top_buffer.data());
    const double lse = s.raw_log_sum_exp();
    out.reserve(k);
    for (size_t i = 0; i < k; ++i) {
      const double lp = static_cast<double>(s.top_buffer[i].logit) - lse;
      out.push_back(TokenProb{s.top_buffer[i].id, static_cast<float>(std::exp(lp)), static_cast<float>(lp)});
    }
    return out;
  }
  const size_t k = std::min<size_t>(static_cast<size_t>(n), s.set.size);
  s.top_buffer.resize(std::max(s.top_buffer.size(), k));
  const Candidate* data = s.set.data;
  select_top(s.set.size, k, s.top_buffer.data(), [data](size_t i) { return data[i]; });
  const double log_sum = std::log(s.dist.sum);
  out.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    const Candidate& c = s.top_buffer[i];
    const double lp = c.p > 0.0f ? static_cast<double>(c.logit) - s.dist.max_logit - log_sum
                                 : -std::numeric_limits<double>::infinity();
    out.push_back(TokenProb{c.id, c.p, static_cast<float>(lp)});
  }
  return out;
}

float Sampler::chosen_logprob(ProbSource source) const {
  const State& s = *s_;
  s.check_sampled("chosen_logprob()");
  if (source == ProbSource::raw) {
    return static_cast<float>(static_cast<double>(s.raw[s.chosen]) - s.raw_log_sum_exp());
  }
  const Candidate& c = s.set.data[s.chosen_index];
  return static_cast<float>(static_cast<double>(c.logit) - s.dist.max_logit - std::log(s.dist.sum));
}

const SamplerParams& Sampler::params() const { return s_->params; }
int32_t Sampler::n_vocab() const { return s_->n_vocab; }
uint32_t Sampler::seed() const { return s_->seed_in_use; }

std::string Sampler::chain_description() const {
  std::string out = "logits";
  if (!s_->params.logit_bias.empty()) out += " -> logit-bias";
  for (SamplerStep st : s_->steps) {
    out += " -> ";
    out += step_name(st);
  }
  out += s_->greedy ? " -> greedy" : " -> dist";
  return out;
}

}  // namespace opal
