// The generation API: what `opal run`, `chat`, `bench`, `perplexity` and the
// server's slots share instead of each writing its own loop.
//
//   decode_prompt(ctx, tokens, opts)  prompt tokens of one sequence in n_batch chunks,
//                                     logits for none, the last or every token
//   Sequence                          one sequence of a Context and the tokens its KV
//                                     cache holds: prefix reuse (keep the common prefix,
//                                     seq_rm the rest, decode the suffix), batch building
//   StopRules                         when generation ends: an end-of-generation token,
//                                     n_predict tokens, a full context
//   generate(seq, sampler, ...)       the sample -> accept -> stop loop with a streaming
//                                     callback per token that may ask to stop
//   ChatState                         a conversation's token history in the cache
//
// The server batches many slots into one decode per step, so it does not call
// decode_prompt() or generate(): its slots use Sequence (prefix reuse, prompt
// chunks) and StopRules (the same stop decisions). See docs/runtime.md.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/context.h"
#include "sampling/sampler.h"
#include "tokenizer/vocab.h"

namespace opal {

class Speculation;  // runtime/speculative.h

// Which prompt tokens get logits.
enum class PromptLogits { None, Last, All };

struct PromptOptions {
  int32_t seq = 0;   // sequence id of every token
  int32_t pos0 = 0;  // position of tokens[0]
  PromptLogits logits = PromptLogits::Last;
  int64_t n_batch = 0;  // tokens per decode() call; 0: the context's n_batch
  // Called after each decoded chunk tokens[begin, end): with PromptLogits::All,
  // ctx.logits(i - begin) are the logits of tokens[i] until the next decode.
  std::function<void(size_t begin, size_t end)> on_chunk;
};

// Decodes `tokens` as one sequence at positions pos0.. in chunks of n_batch.
// With PromptLogits::Last, ctx.logits(ctx.n_outputs() - 1) afterwards are the
// logits of the last token. Throws opal::Error for an empty prompt or a bad
// n_batch, and whatever Context::decode throws (earlier chunks stay cached).
void decode_prompt(Context& ctx, std::span<const int32_t> tokens, const PromptOptions& opts = {});

// Length of the longest common prefix of a and b.
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

// One sequence of a Context and the tokens whose K/V it holds, at positions
// 0..size()-1. All changes to the sequence's cache go through here, so the
// token list and the cache agree (clear() after a failed decode).
class Sequence {
 public:
  explicit Sequence(Context& ctx, int32_t id = 0) : ctx_(&ctx), id_(id) {}

  int32_t id() const { return id_; }
  Context& context() const { return *ctx_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t size() const { return int64_t(tokens_.size()); }

  // Prefix reuse: keeps the longest common prefix of the cached tokens and
  // `prompt`, but never the whole prompt (its last token is evaluated again
  // for its logits); removes the rest from the KV cache. Returns the number of
  // tokens kept: the caller evaluates prompt[kept..]. A recurrent model keeps
  // the longest prefix it has a state checkpoint for (Context::seq_reusable_prefix).
  size_t reuse_prefix(std::span<const int32_t> prompt);
  // Shared prefixes across sequences: makes this sequence hold src's first n
  // tokens by copying their K/V cells (Context::seq_cp) instead of computing
  // them again; its own cached tokens are removed first. False, with nothing
  // changed, when the cells cannot be shared so: a recurrent state, src holding
  // fewer than n tokens, or a sliding-window layer of src that lost the window
  // before n. False with the sequence emptied when the cache had no room.
  bool copy_prefix(const Sequence& src, size_t n);
  // Keeps the first n tokens, removes the rest from the cache (seq_rm).
  void truncate(size_t n);
  // Forgets every token: removes the sequence from the cache.
  void clear();

  // Decodes tokens after the cached ones (positions size()..) in chunks of
  // the context's n_batch and records them; see decode_prompt().
  void decode(std::span<const int32_t> tokens, PromptLogits logits = PromptLogits::Last);

  // Batch building for callers that put several sequences into one decode
  // (the server): appends `token` at position size() and records it. If that
  // decode fails, the caller must clear() the sequence.
  void add(Batch& batch, int32_t token, bool want_logits);
  // Appends the next prompt tokens, prompt[size()..], at most max_tokens of
  // them, flagging the prompt's last token for logits. The cached tokens must
  // be a prefix of `prompt` (after reuse_prefix). Returns how many were added.
  size_t add_prompt_chunk(Batch& batch, std::span<const int32_t> prompt, size_t max_tokens);

 private:
  Context* ctx_;
  int32_t id_;
  std::vector<int32_t> tokens_;
};

// Why a generation ended.
enum class FinishReason {
  Stop,         // an end-of-generation token (not emitted)
  Length,       // n_predict tokens were generated
  ContextFull,  // the sequence holds as many tokens as allowed
  Requested,    // the streaming callback asked to stop
};
// "stop", "length", "context-full", "requested".
const char* finish_reason_name(FinishReason r);

// The stop rules of one generation, asked at the three points of the loop.
struct StopRules {
  int64_t n_predict = -1;   // most tokens to generate; < 0: no limit
  int64_t n_ctx = 0;        // most tokens the sequence may hold; 0: the context's n_ctx
  bool ignore_eog = false;  // generate past end-of-generation tokens (the server's ignore_eos)

  // Before sampling, with n_generated tokens emitted so far: Length when
  // n_predict is reached (n_predict = 0: nothing is sampled).
  std::optional<FinishReason> before_sample(int64_t n_generated) const;
  // A sampled token that ends generation without being emitted (Stop).
  bool ends_generation(const Vocab& vocab, int32_t token) const;
  // After a token was emitted (n_generated counts it; n_cached tokens are in
  // the sequence, the new one not yet): ContextFull when it cannot be decoded
  // (n_cached >= n_ctx), else Length when n_predict is reached.
  std::optional<FinishReason> after_token(int64_t n_generated, int64_t n_cached) const;
};

struct GenerateResult {
  FinishReason reason = FinishReason::Stop;
  int64_t n_generated = 0;  // tokens emitted (an end-of-generation token is not)
};

// Called once per emitted token, in order, with its text (Vocab::token_to_piece,
// special tokens not rendered); returns false to stop after this token.
using TokenCallback = std::function<bool(int32_t token, std::string_view piece)>;

// The sample -> accept -> stop loop. The last decode must have left the
// logits of seq's last token as ctx.logits(n_outputs - 1) (decode_prompt with
// PromptLogits::Last does). Each step samples a token, accepts it into the
// sampler, checks the stop rules, streams it, and decodes it (logits on) when
// generation goes on; the last emitted token is not decoded.
// With `spec` (runtime/speculative.h), the token to decode goes with a draft
// of the tokens after it in one batch (logits for each); the tokens sampled
// from those logits are emitted while they equal the draft, and the cache
// keeps only what was accepted. The emitted tokens are the ones the loop
// without `spec` emits; spec's counters count the drafts.
GenerateResult generate(Sequence& seq, Sampler& sampler, const Vocab& vocab, const StopRules& rules,
                        const TokenCallback& on_token = nullptr, Speculation* spec = nullptr);

// A conversation's state in a Context: the tokens of the rendered
// conversation (prompt and replies) whose K/V are cached in one sequence, and
// the sampler that has seen them. Each turn passes the whole re-rendered
// conversation; only what follows the longest cached prefix is evaluated.
class ChatState {
 public:
  ChatState(Context& ctx, const SamplerParams& sampling, int32_t seq = 0);

  // Evaluates the rendered conversation (prefix reuse, then the suffix, with
  // logits for the last token) and accepts the new tokens into the sampler.
  // Returns how many tokens were evaluated. Throws opal::Error when empty.
  int64_t prompt(std::span<const int32_t> tokens);
  // Generates the reply to the evaluated conversation (with speculation when set).
  GenerateResult reply(const Vocab& vocab, const StopRules& rules, const TokenCallback& on_token = nullptr);
  // Speculative decoding for the replies (null: none); not owned.
  void set_speculation(Speculation* spec) { spec_ = spec; }
  // Forgets the conversation: empties the KV cache and resets the sampler.
  void clear();

  const Sequence& sequence() const { return seq_; }
  Sampler& sampler() { return sampler_; }

 private:
  Sequence seq_;
  Sampler sampler_;
  Speculation* spec_ = nullptr;
};

}  // namespace opal
