// Token sampler: llama.cpp's sampler chain with llama.cpp's names, defaults and
// order (common/sampling + src/llama-sampling). See docs/sampling.md.
//
//   logits -> logit_bias -> [order: penalties; dry; top_n_sigma; top_k; typ_p;
//             top_p; min_p; xtc; temperature] -> dist (seeded std::mt19937)
//
// temp <= 0 makes the `temperature` step keep only the highest logit, so the
// result is the argmax of the logits as penalties/bias left them (greedy).
//
// Usage (one Sampler per sequence; not thread-safe):
//   opal::Sampler s(params, n_vocab);       // validates params, throws opal::Error
//   int32_t tok = s.sample(logits);          // logits: n_vocab floats, not kept
//   s.accept(tok);                           // feeds the repetition penalties
//   auto top = s.top_probs(5);               // optional, after sample()
//
// After the first call, sample() does not allocate.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opal {

class Grammar;
class GrammarVocab;

// llama.cpp's LLAMA_DEFAULT_SEED: draw a random seed.
inline constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

// The sampler names llama.cpp's --samplers takes, in its default order.
std::vector<std::string> default_sampler_order();

struct SamplerParams {
  float temp = 0.8f;                                         // <= 0: greedy
  int32_t top_k = 40;                                        // <= 0: off
  float top_p = 0.95f;                                       // [0, 1]; 1: off
  float min_p = 0.05f;                                       // [0, 1]; 0: off; relative to the top probability
  float typical_p = 1.0f;                                    // [0, 1]; 1: off
  float top_n_sigma = -1.0f;                                 // <= 0: off
  float xtc_probability = 0.0f;                              // [0, 1]; 0: off
  float xtc_threshold = 0.1f;                                // [0, 1]; > 0.5: off
  int32_t min_keep = 0;                                      // top_p / min_p / typ_p / xtc keep at least this many
  float repeat_penalty = 1.0f;                               // > 0; 1: off
  int32_t repeat_last_n = 64;                                // 0: off; -1: every token accepted since reset()
  float presence_penalty = 0.0f;                             // subtracted once from every token in the window
  float frequency_penalty = 0.0f;                            // subtracted once per occurrence in the window
  uint32_t seed = kRandomSeed;                               // kRandomSeed (-1 on the CLI): random
  std::vector<std::string> order = default_sampler_order();  // llama.cpp --samplers names
  int32_t n_probs = 0;                                       // how many top probabilities callers want (server/CLI)
  std::vector<std::pair<int32_t, float>> logit_bias;         // (token, added to its logit; -inf bans)
  // Grammar constraint (sampling/grammar.h; both or neither): before the chain,
  // every token whose text cannot continue the grammar gets -inf, and
  // end-of-generation tokens only pass where the grammar can end. The grammar
  // advances over each token sample() returns (not over accept()ed prompt tokens).
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const GrammarVocab> grammar_vocab;
  // Non-empty: the grammar is lazy (llama.cpp's grammar_lazy): no constraint until the generated text
  // contains this trigger; the grammar then matches from the trigger's first byte (so it starts with it),
  // e.g. "<tool_call>" for tool_choice auto. Text after the trigger that the grammar refuses is a
  // GrammarDeadEnd.
  std::string grammar_trigger;
};

// Throws opal::Error naming the field when a value is out of range, an order
// name is unknown, or a logit_bias token is outside [0, n_vocab).
void validate(const SamplerParams& params, int32_t n_vocab);

// "penalties;top_k;temp" (llama.cpp --samplers; alternative names such as
// "top-k", "nucleus", "temp" accepted) -> canonical names. Throws on unknown.
std::vector<std::string> parse_sampler_names(std::string_view semicolon_list);
// "ekypmt" (llama.cpp --sampling-seq letters) -> canonical names. Throws on unknown.
std::vector<std::string> parse_sampler_letters(std::string_view letters);

struct TokenProb {
  int32_t token = 0;
  float prob = 0;     // probability
  float logprob = 0;  // natural log of prob (exact, not log(rounded prob))
};

// Which distribution top_probs()/chosen_logprob() report.
enum class ProbSource {
  raw,            // softmax of the logits passed to sample() (llama.cpp server's default
                  // for OpenAI logprobs / n_probs: post_sampling_probs = false)
  post_sampling,  // the distribution the token was drawn from, after the whole chain
};

class Sampler {
 public:
  Sampler(const SamplerParams& params, int32_t n_vocab);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // Runs the chain on n_vocab logits and returns the chosen token. With a
  // grammar, throws GrammarDeadEnd (sampling/grammar.h) when no token can
  // continue it.
  int32_t sample(const float* logits);
  // With a grammar: back to its start rule (a new reply), keeping the
  // penalty window and the RNG. reset() does this too.
  void reset_grammar();
  // With a grammar: whether it is complete at this point.
  bool grammar_can_end() const;
  // Records a token of the sequence (generated or prompt) for the penalties.
  // Throws opal::Error if token is outside [0, n_vocab).
  void accept(int32_t token);
  // Forgets accepted tokens and re-seeds the RNG (a fixed seed replays the same
  // draws; the random seed draws a new one), as llama_sampler_reset does.
  void reset();

  // After sample(): the n most probable tokens, most probable first, and the
  // log-probability of the token sample() returned.
  std::vector<TokenProb> top_probs(int n, ProbSource source = ProbSource::raw) const;
  float chosen_logprob(ProbSource source = ProbSource::raw) const;

  const SamplerParams& params() const;
  int32_t n_vocab() const;
  // The seed in use (the drawn one when params.seed == kRandomSeed).
  uint32_t seed() const;
  // "logits -> logit-bias -> penalties -> ... -> dist", like llama.cpp prints.
  std::string chain_description() const;

 private:
  int32_t sample_chain(const float* logits, bool grammar_mask);
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace opal
