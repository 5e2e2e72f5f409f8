// Speculative decoding: drafts of the next tokens, verified by the target in
// one batch (docs/speculative.md).
//
//   Drafter            proposes up to n tokens to follow a sequence's tokens
//   ModelDrafter       a smaller draft model decoding greedily in its own Context (llama.cpp's -md): it keeps
//                      its sequence in step with the target's by prefix reuse and stops drafting when its top
//                      probability falls below p_min
//   NgramDrafter       draft-free prompt lookup (llama.cpp's --spec-type ngram-simple): the last n tokens are
//                      looked up in the earlier tokens (prompt and generated text); the m tokens that followed
//                      their most recent earlier occurrence are the draft (copied on into the draft itself
//                      when the occurrence is less than m tokens back: a repeating stretch repeats on)
//   NgramMapDrafter    llama.cpp's ngram-map-k and ngram-map-k4v: the m tokens (the m-gram) after each earlier
//                      occurrence of the last n tokens (the key) are counted; map-k drafts the m-gram of the
//                      most recent occurrence once it has followed the key at least min-hits times, map-k4v
//                      keeps the first four distinct m-grams and drafts the most frequent when it has min-hits
//                      and at least twice the count of the next
//   NgramModDrafter    llama.cpp's ngram-mod: a pool of 2^20 entries maps a hash of n tokens to the token that
//                      followed them last; the draft follows the chain from the last n tokens, as long as
//                      entries are found (kept across a slot's requests)
//   NgramCacheDrafter  llama.cpp's ngram-cache: 1- to 4-gram statistics of the text, of earlier runs (-lcd)
//                      and of a corpus (-lcs) (runtime/ngram_cache.h)
//   Speculation        a drafter with its limits (draft-max, draft-min) and counters (drafted, accepted), what
//                      generate() (runtime/generation.h) and the server's slots take
//
// Acceptance is llama.cpp's rule: the target samples at every drafted
// position with its own sampler, in order, and a draft token is accepted
// while it equals the token the target sampled; the first sampled token that
// differs (or the one after the last draft token) is kept and ends the step.
// Every emitted token is thus sampled by the target's sampler from the
// target's logits in the order decoding without speculation would sample it,
// so the output is the same (greedy: byte for byte, up to the rounding of
// the batch shape, which flips only exact near-ties).
//
// A recurrent model (RWKV-7) cannot take back the state of rejected draft
// tokens: speculation is refused for it, as target or draft
// (check_speculation_supported).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "runtime/generation.h"
#include "tokenizer/vocab.h"

namespace opal {

// llama.cpp's --spec-type names: none, draft (a draft model), ngram-simple (prompt lookup), ngram-map-k,
// ngram-map-k4v, ngram-mod, ngram-cache.
enum class SpecType { None, Draft, NgramSimple, NgramMapK, NgramMapK4v, NgramMod, NgramCache };
const char* spec_type_name(SpecType t);
// Throws opal::Error listing the known names.
SpecType spec_type_from_name(const std::string& name);

struct SpecParams {
  SpecType type = SpecType::None;
  int n_max = 16;             // most tokens per draft (llama.cpp --draft-max)
  int n_min = 0;              // a shorter draft is not verified (llama.cpp --draft-min)
  float p_min = 0.8f;         // the draft model drafts while its top probability is at least this (--draft-p-min)
  int ngram_n = 3;            // ngram-simple: tokens of the key looked up (--spec-ngram-size-n)
  int ngram_m = 0;            // ngram-simple, -map-*: most tokens drafted after a match; 0: n_max (--spec-ngram-size-m)
  int ngram_min_hits = 1;     // ngram-map-*: times an m-gram must have followed the key; ngram-simple: times the
                              // key must have occurred (--spec-ngram-min-hits)
  std::string lookup_static;  // ngram-cache: the static lookup cache file (-lcs), read at start
  std::string lookup_dynamic;     // ngram-cache: the dynamic lookup cache file (-lcd), read at start (if it exists)
  bool lookup_write_back = true;  // ngram-cache: Drafter::finish() writes -lcd back (false: opal serve reads it only)
  // Throws opal::Error naming the flag for a value out of range.
  void validate() const;
};

struct SpecStats {
  int64_t n_drafted = 0;   // draft tokens sent to the target for verification
  int64_t n_accepted = 0;  // of those, accepted
  int64_t n_verify = 0;    // target decodes that carried a draft
  double acceptance() const { return n_drafted > 0 ? double(n_accepted) / double(n_drafted) : 0.0; }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to n_max tokens that may follow `tokens` (the sequence so far: prompt,
  // generated text and the last sampled token). May return fewer or none.
  virtual std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) = 0;
  // Forgets any state (a new conversation in a server slot).
  virtual void reset() {}
  // The end of a run (opal run, chat, bench-spec): a drafter that keeps what it learned in a file writes it
  // (ngram-cache's -lcd). Returns a line saying what was written, empty for nothing; throws opal::Error.
  virtual std::string finish() { return {}; }
};

class NgramDrafter : public Drafter {
 public:
  // min_hits: the key must have occurred at least this often before (llama.cpp's --spec-ngram-simple-min-hits).
  NgramDrafter(int n, int m, int min_hits = 1) : n_(n), m_(m), min_hits_(min_hits) {}
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) override;

 private:
  int n_, m_, min_hits_;
};

class NgramMapDrafter : public Drafter {
 public:
  // four_values: ngram-map-k4v's rule, else ngram-map-k's.
  NgramMapDrafter(int n, int m, int min_hits, bool four_values)
      : n_(n), m_(m), min_hits_(min_hits), four_values_(four_values) {}
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) override;

 private:
  int n_, m_, min_hits_;
  bool four_values_;
};

class NgramModDrafter : public Drafter {
 public:
  static constexpr size_t kPoolSize = size_t(1) << 20;
  explicit NgramModDrafter(int n) : n_(n), pool_(kPoolSize, -1) {}
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) override;
  // A new conversation: the tokens already hashed are forgotten, the pool is kept (what earlier requests
  // taught it drafts for later ones, as llama.cpp's shared pool does).
  void reset() override { seen_.clear(); }

 private:
  size_t slot(std::span<const int32_t> key) const;
  int n_;
  std::vector<int32_t> pool_;  // hash slot -> next token, -1: empty
  std::vector<int32_t> seen_;  // the tokens whose n-grams are in the pool
};

class ModelDrafter : public Drafter {
 public:
  // Drafts in sequence `seq` of `draft_ctx` (a Context of the draft model;
  // several drafters may share one with distinct ids). Throws for a recurrent draft model.
  ModelDrafter(Context& draft_ctx, int32_t seq, float p_min, int64_t n_vocab_target);
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) override;
  void reset() override { seq_.clear(); }
  int64_t n_decoded() const { return n_decoded_; }  // draft-model tokens evaluated (prompt catch-up and drafts)
  Context& context() const { return seq_.context(); }

  // Drafts for several drafters sharing one draft Context (the server's slots) in lock step: drafter i
  // drafts up to n_max[i] tokens after tokens[i], as draft() would. Every drafter's catch-up tokens go into
  // the first decode and each further draft position is one decode for all the drafters still drafting
  // (a catch-up longer than the batch has room for is decoded alone first). Adds the draft-model decodes
  // made to *n_decodes when given. A failed decode clears the sequences it carried and ends their drafts.
  static std::vector<std::vector<int32_t>> draft_together(std::span<ModelDrafter* const> drafters,
                                                          std::span<const std::span<const int32_t>> tokens,
                                                          std::span<const int> n_max, int64_t* n_decodes = nullptr);

 private:
  // Takes the draft token after logits `l` into `out` if the draft model is sure enough; false: drafting ends.
  bool pick(const float* l, int n_max, std::vector<int32_t>& out) const;
  Sequence seq_;
  float p_min_;
  int64_t n_vocab_target_;
  int64_t n_decoded_ = 0;
};

// A draft model's vocabulary must be the target's, as llama.cpp checks it:
// the same tokenizer type, BOS/EOS ids and add_bos/add_eos flags, sizes within
// 128 of each other and the same text for every id from 5 to the smaller size.
// Throws opal::Error with the first difference found.
void check_draft_vocab(const Vocab& target, const Vocab& draft);
// Throws opal::Error when `ctx`'s model cannot be used with speculation (`role`: "target" or "draft").
void check_speculation_supported(const Context& ctx, const char* role);

// A drafter with its limits and counters: what generate() and the server take.
class Speculation {
 public:
  Speculation(std::unique_ptr<Drafter> drafter, const SpecParams& params);
  // The draft for `tokens`, at most min(n_max, room) tokens; empty when shorter than n_min.
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int64_t room);
  // Drafts for several Speculations at once: drafts[i] = specs[i]->propose(tokens[i], rooms[i]), with the
  // draft models' drafters that share a Context drafting together (ModelDrafter::draft_together: one
  // draft-model decode per draft position for all of them). Adds the draft-model decodes to *n_decodes.
  static std::vector<std::vector<int32_t>> propose_together(std::span<Speculation* const> specs,
                                                            std::span<const std::span<const int32_t>> tokens,
                                                            std::span<const int64_t> rooms,
                                                            int64_t* n_decodes = nullptr);
  // Counts a verification: `drafted` tokens sent, `accepted` of them taken.
  void record(int64_t drafted, int64_t accepted);
  Drafter& drafter() { return *drafter_; }
  const SpecParams& params() const { return params_; }
  const SpecStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  std::unique_ptr<Drafter> drafter_;
  SpecParams params_;
  SpecStats stats_;
};

// Context parameters for a target verifying drafts: room in the graph cache
// for every verification shape (1 + 1..n_max tokens, all with logits) besides
// the usual ones, so that drafts of varying length do not rebuild graphs.
void fit_context_for_speculation(ContextParams& cp, const SpecParams& params);

// The drafter `params` names: an NgramDrafter, or a ModelDrafter in sequence
// `seq` of draft_ctx (required for SpecType::Draft). Null for SpecType::None.
std::unique_ptr<Speculation> make_speculation(const SpecParams& params, Context* draft_ctx, int32_t seq,
                                              int64_t n_vocab_target);

}  // namespace opal
