// Speculative decoding (runtime/speculative.h): the n-gram and draft-model
// drafters, the draft vocabulary check, the draft limits and counters.
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/ngram_cache.h"

namespace opal {

const char* spec_type_name(SpecType t) {
  switch (t) {
    case SpecType::None: return "none";
    case SpecType::Draft: return "draft";
    case SpecType::NgramSimple: return "ngram-simple";
    case SpecType::NgramMapK: return "ngram-map-k";
    case SpecType::NgramMapK4v: return "ngram-map-k4v";
    case SpecType::NgramMod: return "ngram-mod";
    case SpecType::NgramCache: return "ngram-cache";
  }
  return "?";
}

SpecType spec_type_from_name(const std::string& name) {
  constexpr SpecType kAll[] = {SpecType::None,        SpecType::Draft,    SpecType::NgramSimple, SpecType::NgramMapK,
                               SpecType::NgramMapK4v, SpecType::NgramMod, SpecType::NgramCache};
  std::string known;
  for (SpecType t : kAll) {
    if (name == spec_type_name(t)) return t;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", spec_type_name(t));
  }
  fail("--spec-type: unknown speculative decoding type '{}' (known: {})", name, known);
}

void SpecParams::validate() const {
  if (n_max < 1 || n_max > 1024) fail("--draft-max must be in [1, 1024], got {}", n_max);
  if (n_min < 0 || n_min > n_max) fail("--draft-min must be in [0, --draft-max = {}], got {}", n_max, n_min);
  if (!(p_min >= 0.0f && p_min <= 1.0f)) fail("--draft-p-min must be in [0, 1], got {}", p_min);
  if (ngram_n < 1 || ngram_n > 1024) fail("--spec-ngram-size-n must be in [1, 1024], got {}", ngram_n);
  if (ngram_m < 0 || ngram_m > 1024) fail("--spec-ngram-size-m must be in [0, 1024], got {}", ngram_m);
  if (ngram_min_hits < 1 || ngram_min_hits > 1024)
    fail("--spec-ngram-min-hits must be in [1, 1024], got {}", ngram_min_hits);
  if (type != SpecType::NgramCache) {
    if (!lookup_static.empty())
      fail("-lcs is a lookup cache for --spec-type ngram-cache, not {}", spec_type_name(type));
    if (!lookup_dynamic.empty())
      fail("-lcd is a lookup cache for --spec-type ngram-cache, not {}", spec_type_name(type));
  }
}

std::vector<int32_t> NgramDrafter::draft(std::span<const int32_t> tokens, int n_max) {
  const size_t n = size_t(n_), len = tokens.size();
  if (n_max <= 0 || len < n + 1) return {};
  const size_t m = size_t(std::min(m_ > 0 ? m_ : n_max, n_max));
  const std::span<const int32_t> key = tokens.subspan(len - n);
  // The most recent earlier occurrence of the key: it starts at i < len - n. What followed it is copied as an
  // overlapping copy (LZ77's): past the end of `tokens` the copy reads the draft itself, so a repeating
  // stretch of period p drafts m tokens, not p.
  // With min_hits H > 1 the key must have occurred H times; the most recent occurrence is drafted from.
  size_t latest = len, hits = 0;
  for (size_t i = len - n; i-- > 0 && hits < size_t(min_hits_);) {
    if (!std::equal(key.begin(), key.end(), tokens.begin() + std::ptrdiff_t(i))) continue;
    if (hits++ == 0) latest = i;
  }
  if (hits >= size_t(min_hits_)) {
    const size_t from = latest + n;  // < len
    std::vector<int32_t> out;
    out.reserve(m);
    for (size_t j = 0; j < m; ++j) out.push_back(from + j < len ? tokens[from + j] : out[from + j - len]);
    return out;
  }
  return {};
}

std::vector<int32_t> NgramMapDrafter::draft(std::span<const int32_t> tokens, int n_max) {
  const size_t n = size_t(n_), len = tokens.size();
  const size_t m = size_t(std::min(m_ > 0 ? m_ : n_max, n_max));
  if (n_max <= 0 || m == 0 || len < n + m + 1) return {};
  const std::span<const int32_t> key = tokens.subspan(len - n);
  // The m-grams after the key's earlier occurrences i (whole ones: i + n + m <= len), most recent first; for
  // map-k4v the first four distinct ones met, with their counts.
  struct Value {
    size_t at;  // where the m-gram starts in tokens
    int count;
  };
  std::vector<Value> values;
  const auto same = [&](size_t a, size_t b) {
    return std::equal(tokens.begin() + std::ptrdiff_t(a), tokens.begin() + std::ptrdiff_t(a + m),
                      tokens.begin() + std::ptrdiff_t(b));
  };
  for (size_t i = len - n - m + 1; i-- > 0;) {
    if (!std::equal(key.begin(), key.end(), tokens.begin() + std::ptrdiff_t(i))) continue;
    const size_t at = i + n;
    auto v = std::find_if(values.begin(), values.end(), [&](const Value& x) { return same(x.at, at); });
    if (v != values.end()) ++v->count;
    else if (values.empty() || (four_values_ && values.size() < 4)) values.push_back({at, 1});
  }
  if (values.empty()) return {};
  const Value* best = &values[0];  // map-k: the most recent occurrence's m-gram
  if (four_values_) {
    int second = 0;
    for (const Value& v : values)
      if (v.count > best->count) best = &v;
    for (const Value& v : values)
      if (&v != best) second = std::max(second, v.count);
    if (best->count < 2 * second) return {};
  }
  if (best->count < min_hits_) return {};
  return std::vector<int32_t>(tokens.begin() + std::ptrdiff_t(best->at), tokens.begin() + std::ptrdiff_t(best->at + m));
}

size_t NgramModDrafter::slot(std::span<const int32_t> key) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;  // an LCG step per token (Knuth's MMIX constants), then a final mix
  for (int32_t t : key) h = (h + uint64_t(uint32_t(t)) + 1) * 6364136223846793005ull + 1442695040888963407ull;
  h ^= h >> 29;
  return size_t(h) & (kPoolSize - 1);
}

std::vector<int32_t> NgramModDrafter::draft(std::span<const int32_t> tokens, int n_max) {
  const size_t n = size_t(n_), len = tokens.size();
  // Hash the n-grams not seen yet: from where `tokens` leaves what was seen (a new or edited sequence goes back).
  size_t from = std::mismatch(seen_.begin(), seen_.end(), tokens.begin(), tokens.end()).first - seen_.begin();
  for (size_t j = std::max(from, n); j < len; ++j) pool_[slot(tokens.subspan(j - n, n))] = tokens[j];
  seen_.assign(tokens.begin(), tokens.end());
  std::vector<int32_t> out;
  if (n_max <= 0 || len < n) return out;
  std::vector<int32_t> key(tokens.end() - std::ptrdiff_t(n), tokens.end());
  while (int(out.size()) < n_max) {
    const int32_t next = pool_[slot(key)];
    if (next < 0) break;
    out.push_back(next);
    key.erase(key.begin());
    key.push_back(next);
  }
  return out;
}

ModelDrafter::ModelDrafter(Context& draft_ctx, int32_t seq, float p_min, int64_t n_vocab_target)
    : seq_(draft_ctx, seq), p_min_(p_min), n_vocab_target_(n_vocab_target) {
  check_speculation_supported(draft_ctx, "draft");
}

bool ModelDrafter::pick(const float* l, int n_max, std::vector<int32_t>& out) const {
  const int64_t nv = seq_.context().n_vocab();
  const int64_t best = std::max_element(l, l + nv) - l;
  if (best >= n_vocab_target_) return false;
  if (p_min_ > 0) {
    double sum = 0;  // the top token's probability: 1 / sum(exp(l - max))
    for (int64_t i = 0; i < nv; ++i) sum += std::exp(double(l[i]) - double(l[best]));
    if (1.0 / sum < double(p_min_)) return false;
  }
  out.push_back(int32_t(best));
  return int(out.size()) < n_max;
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> tokens, int n_max) {
  ModelDrafter* self = this;
  return draft_together({&self, 1}, {&tokens, 1}, {&n_max, 1})[0];
}

std::vector<std::vector<int32_t>> ModelDrafter::draft_together(std::span<ModelDrafter* const> drafters,
                                                               std::span<const std::span<const int32_t>> tokens,
                                                               std::span<const int> n_max, int64_t* n_decodes) {
  const size_t n = drafters.size();
  std::vector<std::vector<int32_t>> out(n);
  if (n == 0) return out;
  if (tokens.size() != n || n_max.size() != n)
    fail("draft_together: {} drafters, {} token lists, {} limits", n, tokens.size(), n_max.size());
  Context& c = drafters[0]->context();
  for (ModelDrafter* d : drafters)
    if (&d->context() != &c) fail("drafters drafting together must share one draft context");
  const size_t n_batch = size_t(std::max<int64_t>(1, c.params().n_batch));
  std::vector<int> limit(n, 0);
  std::vector<size_t> going;  // drafters whose last draft token is still to be decoded
  int64_t decodes = 0;
  // Decodes `batch` carrying the drafters `who` (their logits rows in order); a failure clears their sequences.
  Batch batch;
  const auto decode = [&](const std::vector<size_t>& who) {
    ++decodes;
    try {
      c.decode(batch);
    } catch (const Error&) {  // a draft is only a guess: a failed draft decode drafts nothing more
      for (size_t i : who) drafters[i]->seq_.clear();
      return false;
    }
    return true;
  };
  // 1. Catch-up: each sequence is brought to its tokens (prefix reuse), all in one batch where they fit.
  std::vector<size_t> first;
  for (size_t i = 0; i < n; ++i) {
    ModelDrafter& d = *drafters[i];
    const std::span<const int32_t> t = tokens[i];
    // The drafts sit at positions size()..size()+n_max-2 of the draft context (the last one is not decoded).
    limit[i] = int(std::min<int64_t>(n_max[i], c.n_ctx() - int64_t(t.size()) + 1));
    if (t.empty() || limit[i] <= 0) continue;
    const size_t keep = d.seq_.reuse_prefix(t);
    const std::span<const int32_t> rest = t.subspan(keep);
    d.n_decoded_ += int64_t(rest.size());
    if (rest.size() <= n_batch - batch.size()) {
      for (size_t j = 0; j < rest.size(); ++j) d.seq_.add(batch, rest[j], j + 1 == rest.size());
      first.push_back(i);
      continue;
    }
    try {  // too long for the shared batch: on its own, in chunks
      ++decodes;
      d.seq_.decode(rest);
    } catch (const Error&) {
      d.seq_.clear();
      continue;
    }
    if (d.pick(c.logits(c.n_outputs() - 1), limit[i], out[i])) going.push_back(i);
  }
  if (batch.size() > 0 && decode(first))
    for (size_t r = 0; r < first.size(); ++r)
      if (drafters[first[r]]->pick(c.logits(int64_t(r)), limit[first[r]], out[first[r]])) going.push_back(first[r]);
  // 2. One decode per draft position for every drafter still drafting (in groups of n_batch).
  while (!going.empty()) {
    std::sort(going.begin(), going.end());
    std::vector<size_t> next;
    for (size_t g = 0; g < going.size(); g += n_batch) {
      const std::vector<size_t> who(going.begin() + std::ptrdiff_t(g),
                                    going.begin() + std::ptrdiff_t(std::min(going.size(), g + n_batch)));
      batch.clear();
      for (size_t i : who) {
        drafters[i]->seq_.add(batch, out[i].back(), true);
        ++drafters[i]->n_decoded_;
      }
      if (!decode(who)) continue;
      for (size_t r = 0; r < who.size(); ++r)
        if (drafters[who[r]]->pick(c.logits(int64_t(r)), limit[who[r]], out[who[r]])) next.push_back(who[r]);
    }
    going = std::move(next);
  }
  if (n_decodes) *n_decodes += decodes;
  return out;
}

void check_draft_vocab(const Vocab& target, const Vocab& draft) {
  const auto refuse = [](const std::string& why) {
    fail("the draft model's vocabulary does not match the target's: {}", why);
  };
  if (target.type() != draft.type())
    refuse(fmt::format("tokenizer {} vs the target's {}", draft.type_name(), target.type_name()));
  if (target.add_bos() != draft.add_bos() || (target.add_bos() && target.bos() != draft.bos()))
    refuse(fmt::format("BOS {} (add_bos {}) vs the target's {} (add_bos {})", draft.bos(), draft.add_bos(),
                       target.bos(), target.add_bos()));
  if (target.add_eos() != draft.add_eos() || target.eos() != draft.eos())
    refuse(fmt::format("EOS {} (add_eos {}) vs the target's {} (add_eos {})", draft.eos(), draft.add_eos(),
                       target.eos(), target.add_eos()));
  const int32_t nt = target.n_tokens(), nd = draft.n_tokens();
  if (std::abs(nt - nd) > 128)
    refuse(fmt::format("{} tokens vs the target's {} (llama.cpp allows a difference of 128)", nd, nt));
  for (int32_t id = 5; id < std::min(nt, nd); ++id)
    if (target.token_text(id) != draft.token_text(id))
      refuse(fmt::format("token {} is '{}' vs the target's '{}'", id, draft.token_text(id), target.token_text(id)));
}

void check_speculation_supported(const Context& ctx, const char* role) {
  if (ctx.recurrent())
    fail(
        "speculative decoding is not supported for the {} model: {} is recurrent, and its state cannot take back "
        "rejected draft tokens",
        role, ctx.model().hparams().arch);
}

Speculation::Speculation(std::unique_ptr<Drafter> drafter, const SpecParams& params)
    : drafter_(std::move(drafter)), params_(params) {
  params_.validate();
  if (!drafter_) fail("speculation without a drafter");
}

std::vector<int32_t> Speculation::propose(std::span<const int32_t> tokens, int64_t room) {
  const int n = int(std::min<int64_t>(params_.n_max, room));
  if (n <= 0) return {};
  std::vector<int32_t> d = drafter_->draft(tokens, n);
  if (int(d.size()) > n) d.resize(size_t(n));
  if (int(d.size()) < std::max(1, params_.n_min)) d.clear();
  return d;
}

std::vector<std::vector<int32_t>> Speculation::propose_together(std::span<Speculation* const> specs,
                                                                std::span<const std::span<const int32_t>> tokens,
                                                                std::span<const int64_t> rooms, int64_t* n_decodes) {
  const size_t n = specs.size();
  if (tokens.size() != n || rooms.size() != n)
    fail("propose_together: {} speculations, {} token lists, {} rooms", n, tokens.size(), rooms.size());
  std::vector<std::vector<int32_t>> drafts(n);
  std::vector<int> limit(n);
  std::vector<bool> done(n, false);
  for (size_t i = 0; i < n; ++i) {
    limit[i] = int(std::min<int64_t>(specs[i]->params_.n_max, rooms[i]));
    done[i] = limit[i] <= 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    auto* md = dynamic_cast<ModelDrafter*>(specs[i]->drafter_.get());
    if (!md) {
      drafts[i] = specs[i]->drafter_->draft(tokens[i], limit[i]);
      done[i] = true;
      continue;
    }
    // Every draft-model drafter on the same context as this one drafts with it.
    std::vector<size_t> group;
    std::vector<ModelDrafter*> ds;
    std::vector<std::span<const int32_t>> ts;
    std::vector<int> lims;
    for (size_t j = i; j < n; ++j) {
      auto* mj = done[j] ? nullptr : dynamic_cast<ModelDrafter*>(specs[j]->drafter_.get());
      if (!mj || &mj->context() != &md->context()) continue;
      group.push_back(j);
      ds.push_back(mj);
      ts.push_back(tokens[j]);
      lims.push_back(limit[j]);
      done[j] = true;
    }
    std::vector<std::vector<int32_t>> got = ModelDrafter::draft_together(ds, ts, lims, n_decodes);
    for (size_t k = 0; k < group.size(); ++k) drafts[group[k]] = std::move(got[k]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (limit[i] <= 0) continue;
    std::vector<int32_t>& d = drafts[i];
    if (int(d.size()) > limit[i]) d.resize(size_t(limit[i]));
    if (int(d.size()) < std::max(1, specs[i]->params_.n_min)) d.clear();
  }
  return drafts;
}

void Speculation::record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  stats_.n_drafted += drafted;
  stats_.n_accepted += accepted;
  ++stats_.n_verify;
}

void fit_context_for_speculation(ContextParams& cp, const SpecParams& params) {
  if (params.type != SpecType::None) cp.n_graphs = std::max(cp.n_graphs, params.n_max + 8);
}

std::unique_ptr<Speculation> make_speculation(const SpecParams& params, Context* draft_ctx, int32_t seq,
                                              int64_t n_vocab_target) {
  params.validate();
  switch (params.type) {
    case SpecType::None: return nullptr;
    case SpecType::NgramSimple:
      return std::make_unique<Speculation>(
          std::make_unique<NgramDrafter>(params.ngram_n, params.ngram_m, params.ngram_min_hits), params);
    case SpecType::NgramMapK:
    case SpecType::NgramMapK4v:
      return std::make_unique<Speculation>(
          std::make_unique<NgramMapDrafter>(params.ngram_n, params.ngram_m, params.ngram_min_hits,
                                            params.type == SpecType::NgramMapK4v),
          params);
    case SpecType::NgramMod:
      return std::make_unique<Speculation>(std::make_unique<NgramModDrafter>(params.ngram_n), params);
    case SpecType::NgramCache:
      return std::make_unique<Speculation>(make_ngram_cache_drafter(params.lookup_static, params.lookup_dynamic,
                                                                    n_vocab_target, params.lookup_write_back),
                                           params);
    case SpecType::Draft:
      if (!draft_ctx) fail("speculative decoding with a draft model needs one (-md FILE)");
      return std::make_unique<Speculation>(
          std::make_unique<ModelDrafter>(*draft_ctx, seq, params.p_min, n_vocab_target), params);
  }
  return nullptr;
}

}  // namespace opal
