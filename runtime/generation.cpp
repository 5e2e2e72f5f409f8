// The generation API (runtime/generation.h): prompt decode in batches,
// sequences with prefix reuse, the stop rules, the sampling loop, chat state.
#include "runtime/generation.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "runtime/speculative.h"

namespace opal {

void decode_prompt(Context& ctx, std::span<const int32_t> tokens, const PromptOptions& opts) {
  if (tokens.empty()) fail("decode_prompt: the prompt is empty");
  const int64_t n_batch = opts.n_batch > 0 ? opts.n_batch : ctx.params().n_batch;
  if (n_batch <= 0) fail("decode_prompt: batch size must be positive, got {}", n_batch);
  const size_t n = tokens.size();
  Batch b;
  for (size_t s = 0; s < n; s += size_t(n_batch)) {
    b.clear();
    const size_t e = std::min(n, s + size_t(n_batch));
    for (size_t i = s; i < e; ++i) {
      const bool want = opts.logits == PromptLogits::All || (opts.logits == PromptLogits::Last && i + 1 == n);
      b.add(tokens[i], opts.pos0 + int32_t(i), opts.seq, want);
    }
    ctx.decode(b);
    if (opts.on_chunk) opts.on_chunk(s, e);
  }
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

size_t Sequence::reuse_prefix(std::span<const int32_t> prompt) {
  size_t keep = common_prefix(tokens_, prompt);
  if (!prompt.empty() && keep >= prompt.size()) keep = prompt.size() - 1;  // re-evaluate the last token
  // A recurrent state restarts from a checkpoint at or before the common prefix (or from nothing).
  keep = size_t(std::max<int32_t>(0, ctx_->seq_reusable_prefix(id_, int32_t(keep))));
  if (keep == 0 && !tokens_.empty() && ctx_->recurrent()) {
    clear();
    return 0;
  }
  // Sliding-window layers may have dropped the window before `keep`: then the whole prompt is decoded again
  // (llama.cpp's server does the same).
  if (keep > 0 && !ctx_->seq_can_resume(id_, int32_t(keep))) keep = 0;
  truncate(keep);
  return keep;
}

bool Sequence::copy_prefix(const Sequence& src, size_t n) {
  if (ctx_->recurrent() || src.ctx_ != ctx_ || src.id_ == id_ || n == 0 || n > src.tokens_.size()) return false;
  if (!ctx_->seq_can_resume(src.id_, int32_t(n))) return false;
  clear();
  try {
    ctx_->kv_cache().seq_cp(src.id_, id_, 0, int32_t(n));
    // A sliding cache needs only the window before n (seq_can_resume's rule).
    if (KvCache* swa = ctx_->swa_kv_cache())
      swa->seq_cp(src.id_, id_, int32_t(std::max<int64_t>(0, int64_t(n) - swa->window() + 1)), int32_t(n));
  } catch (const Error&) {  // no room for the copy: the caller computes the prefix instead
    ctx_->remove_seq(id_);
    return false;
  }
  tokens_.assign(src.tokens_.begin(), src.tokens_.begin() + std::ptrdiff_t(n));
  return true;
}

void Sequence::truncate(size_t n) {
  ctx_->seq_rm(id_, int32_t(n), -1);
  if (n < tokens_.size()) tokens_.resize(n);
}

void Sequence::clear() {
  ctx_->remove_seq(id_);
  tokens_.clear();
}

void Sequence::decode(std::span<const int32_t> tokens, PromptLogits logits) {
  PromptOptions o;
  o.seq = id_;
  o.pos0 = int32_t(tokens_.size());
  o.logits = logits;
  o.on_chunk = [&](size_t begin, size_t end) {  // record each chunk once the cache holds it
    tokens_.insert(tokens_.end(), tokens.begin() + std::ptrdiff_t(begin), tokens.begin() + std::ptrdiff_t(end));
  };
  decode_prompt(*ctx_, tokens, o);
}

void Sequence::add(Batch& batch, int32_t token, bool want_logits) {
  batch.add(token, int32_t(tokens_.size()), id_, want_logits);
  tokens_.push_back(token);
}

size_t Sequence::add_prompt_chunk(Batch& batch, std::span<const int32_t> prompt, size_t max_tokens) {
  const size_t from = tokens_.size();
  if (from >= prompt.size()) return 0;
  const size_t k = std::min(prompt.size() - from, max_tokens);
  for (size_t j = from; j < from + k; ++j) add(batch, prompt[j], j + 1 == prompt.size());
  return k;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ContextFull: return "context-full";
    case FinishReason::Requested: return "requested";
  }
  return "?";
}

std::optional<FinishReason> StopRules::before_sample(int64_t n_generated) const {
  if (n_predict >= 0 && n_generated >= n_predict) return FinishReason::Length;
  return std::nullopt;
}

bool StopRules::ends_generation(const Vocab& vocab, int32_t token) const { return !ignore_eog && vocab.is_eog(token); }

std::optional<FinishReason> StopRules::after_token(int64_t n_generated, int64_t n_cached) const {
  if (n_cached >= n_ctx) return FinishReason::ContextFull;
  if (n_predict >= 0 && n_generated >= n_predict) return FinishReason::Length;
  return std::nullopt;
}

GenerateResult generate(Sequence& seq, Sampler& sampler, const Vocab& vocab, const StopRules& rules,
                        const TokenCallback& on_token, Speculation* spec) {
  Context& ctx = seq.context();
  StopRules r = rules;
  if (r.n_ctx <= 0) r.n_ctx = ctx.n_ctx();
  GenerateResult res;
  if (const auto f = r.before_sample(res.n_generated)) {
    res.reason = *f;
    return res;
  }
  if (ctx.n_outputs() < 1) fail("generate: the last decode left no logits to sample from");
  if (spec) check_speculation_supported(ctx, "target");
  // The last decode's logits rows row0.. are those of the seq's last 1 + draft.size() tokens: the token decoded
  // (sampled before, or the prompt's last) and the draft after it.
  int64_t row0 = ctx.n_outputs() - 1;
  std::vector<int32_t> draft, next;
  for (;;) {
    const int64_t base = seq.size() - int64_t(draft.size());  // tokens before the first sampled row's token
    int32_t tok = -1;
    size_t j = 0;
    std::optional<FinishReason> end;
    for (;; ++j) {  // sample row j: the token after seq's first base + j tokens
      tok = sampler.sample(ctx.logits(row0 + int64_t(j)));
      sampler.accept(tok);
      if (r.ends_generation(vocab, tok)) {
        end = FinishReason::Stop;
        break;
      }
      const std::string piece = vocab.token_to_piece(tok, false);
      ++res.n_generated;
      const bool go_on = !on_token || on_token(tok, piece);
      end = r.after_token(res.n_generated, base + int64_t(j));
      if (!end && !go_on) end = FinishReason::Requested;
      if (end || j >= draft.size() || tok != draft[j]) break;
    }
    if (spec) spec->record(int64_t(draft.size()), int64_t(j));
    // The rejected draft tokens leave the cache (without a draft there are none: truncating anyway cost a scan of
    // every cell's metadata per token, 1 MB at -c 131072).
    if (j < draft.size()) seq.truncate(size_t(base + int64_t(j)));
    if (end) {
      res.reason = *end;
      return res;
    }
    // Decode tok, with a draft of what follows it when speculating.
    next.assign(1, tok);
    draft.clear();
    if (spec) {
      std::vector<int32_t> history = seq.tokens();
      history.push_back(tok);
      // Room: the context (a draft token at position p needs p < n_ctx), n_predict (the last token is not
      // decoded) and one ubatch for the whole verification.
      int64_t room = std::min(r.n_ctx, ctx.n_ctx()) - seq.size() - 1;
      if (r.n_predict >= 0) room = std::min(room, r.n_predict - res.n_generated - 1);
      room = std::min(room, std::min(ctx.params().n_ubatch, ctx.params().n_batch) - 1);
      draft = spec->propose(history, room);
      next.insert(next.end(), draft.begin(), draft.end());
    }
    seq.decode(next, draft.empty() ? PromptLogits::Last : PromptLogits::All);
    row0 = ctx.n_outputs() - int64_t(next.size());
  }
}

ChatState::ChatState(Context& ctx, const SamplerParams& sampling, int32_t seq)
    : seq_(ctx, seq), sampler_(sampling, int32_t(ctx.n_vocab())) {}

int64_t ChatState::prompt(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("the chat template rendered an empty prompt");
  const size_t common = seq_.reuse_prefix(tokens);
  seq_.decode(tokens.subspan(common));
  for (size_t i = common; i < tokens.size(); ++i) sampler_.accept(tokens[i]);
  return int64_t(tokens.size() - common);
}

GenerateResult ChatState::reply(const Vocab& vocab, const StopRules& rules, const TokenCallback& on_token) {
  sampler_.reset_grammar();  // each reply starts the grammar (if any) again
  return generate(seq_, sampler_, vocab, rules, on_token, spec_);
}

void ChatState::clear() {
  Context& ctx = seq_.context();
  ctx.reset();
  seq_ = Sequence(ctx, seq_.id());
  sampler_.reset();
}

}  // namespace opal
