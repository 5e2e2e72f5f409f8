#include "runtime/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "models/architecture.h"
#include "runtime/key_shift.h"

namespace opal {

struct Context::Bucket {
  GraphInputs in;
  std::unique_ptr<ScheduledGraph> sg;
  Tensor* logits = nullptr;
  uint64_t last_used = 0;
};

Context::Context(const Model& model, const ContextParams& params) : model_(model), params_(params) {
  const HParams& hp = model.hparams();
  if (params_.n_ctx <= 0) params_.n_ctx = hp.n_ctx_train > 0 ? hp.n_ctx_train : 2048;
  if (params_.n_ctx > (int64_t(1) << 24)) fail("context size {} is too large", params_.n_ctx);
  if (params_.n_batch <= 0) fail("batch size must be positive, got {}", params_.n_batch);
  if (params_.n_ubatch <= 0) fail("ubatch size must be positive, got {}", params_.n_ubatch);
  if (params_.n_graphs <= 0) fail("the graph cache must hold at least one shape, got n_graphs = {}", params_.n_graphs);
  params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
  if (params_.n_threads > 0) model.registry().set_threads(params_.n_threads);
  if (params_.n_seq_max <= 0) fail("n_seq_max must be positive, got {}", params_.n_seq_max);
  BufferType& bt = model.registry().host().compute_buffer_type();
  const DType type_k = params_.kv_type, type_v = params_.kv_type_v.value_or(params_.kv_type);
  const bool quantized = dtype_traits(type_k).quantized || dtype_traits(type_v).quantized;
  flash_ = params_.flash_attn == FlashAttn::On || (params_.flash_attn == FlashAttn::Auto && quantized);
  if (!hp.recurrent && dtype_traits(type_v).quantized && !flash_)
    fail(
        "V cache type {} needs flash attention (-fa on or auto), as in llama.cpp: a quantized V cache is read by "
        "the tiled attention only",
        dtype_name(type_v));
  if (hp.recurrent) {  // fixed-size state per sequence, kept in f32 whatever kv_type says (as llama.cpp)
    state_ = std::make_unique<RecurrentState>(hp, params_.n_seq_max, bt);
    return;
  }
  std::vector<uint8_t> swa = hp.swa_layers, global(size_t(hp.n_layer), 1);
  bool any_swa = false;
  for (size_t il = 0; il < swa.size(); ++il) {
    any_swa = any_swa || swa[il];
    global[il] = !swa[il];
  }
  // llama.cpp's llama_kv_cache_iswa: min(n_ctx, pad(n_swa * n_seq_max + n_ubatch, 256)) cells for sliding layers.
  const int64_t n_swa_cells = std::min(
      params_.n_ctx, (hp.n_swa * params_.n_seq_max + std::min(params_.n_ubatch, params_.n_ctx) + 255) / 256 * 256);
  if (any_swa && !params_.swa_full && n_swa_cells < params_.n_ctx) {
    kv_ = std::make_unique<KvCache>(hp, params_.n_ctx, type_k, type_v, bt, global, 0);
    kv_swa_ = std::make_unique<KvCache>(hp, n_swa_cells, type_k, type_v, bt, swa, hp.n_swa);
  } else {
    kv_ = std::make_unique<KvCache>(hp, params_.n_ctx, type_k, type_v, bt);
  }
}

Context::~Context() = default;

std::string Context::kv_summary() const {
  if (!kv_) return {};
  const HParams& hp = model_.hparams();
  // Bytes one token takes in every layer's K and V rows (llama.cpp's "KV self size" over n_ctx).
  uint64_t per_token = 0;
  for (const KvCache* kv : {kv_.get(), kv_swa_.get()})
    for (int64_t il = 0; kv && il < hp.n_layer; ++il)
      if (kv->has_layer(il))
        per_token += row_bytes(kv->type(), hp.n_embd_k_gqa(il)) + row_bytes(kv->type_v(), hp.n_embd_v_gqa(il));
  std::string s = fmt::format("KV cache {:.2f} MiB ({} cells", double(kv_bytes()) / 1048576.0, kv_->n_cells());
  if (kv_swa_) s += fmt::format("; sliding-window layers: {} cells", kv_swa_->n_cells());
  s += fmt::format("), K {}, V {}: {} bytes per token; flash attention {}", dtype_name(kv_->type()),
                   dtype_name(kv_->type_v()), per_token, flash_ ? "on" : "off");
  return s;
}

void Context::reset() {
  if (state_) return state_->clear();
  kv_->clear();
  if (kv_swa_) kv_swa_->clear();
}
void Context::remove_seq(int32_t seq) {
  if (state_) return state_->seq_rm(seq, -1, -1);
  kv_->remove_seq(seq);
  if (kv_swa_) kv_swa_->remove_seq(seq);
}
int32_t Context::seq_pos_max(int32_t seq) const { return state_ ? state_->seq_pos_max(seq) : kv_->seq_pos_max(seq); }
int32_t Context::seq_pos_min(int32_t seq) const {
  if (state_) return state_->seq_pos_min(seq);
  const int32_t m = kv_->seq_pos_min(seq);
  return kv_swa_ && m >= 0 ? std::max(m, kv_swa_->seq_pos_min(seq)) : m;
}

bool Context::seq_can_resume(int32_t seq, int32_t pos) const {
  if (!kv_swa_ || pos <= 0) return true;
  for (int64_t p = std::max<int64_t>(0, int64_t(pos) - kv_swa_->window() + 1); p < pos; ++p)
    if (!kv_swa_->has_cell(seq, int32_t(p))) return false;
  return true;
}

Context::CacheState Context::save_cache() const {
  if (!kv_) fail("save_cache: a recurrent model has no KV cache (its state has checkpoints instead)");
  CacheState s;
  s.kv = kv_->save();
  if (kv_swa_) s.kv_swa = kv_swa_->save();
  return s;
}

void Context::restore_cache(const CacheState& saved) {
  if (!kv_) fail("restore_cache: a recurrent model has no KV cache (its state has checkpoints instead)");
  if (saved.kv_swa.empty() != (kv_swa_ == nullptr))
    fail("restore_cache: the saved state {} a sliding-window cache, this context {}",
         saved.kv_swa.empty() ? "has no" : "has", kv_swa_ ? "has one" : "has none");
  kv_->restore(saved.kv);
  if (kv_swa_) kv_swa_->restore(saved.kv_swa);
}

void Context::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
  if (state_) return state_->seq_rm(seq, p0, p1);
  kv_->seq_rm(seq, p0, p1);
  if (kv_swa_) kv_swa_->seq_rm(seq, p0, p1);
}
void Context::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (state_) return state_->seq_cp(src, dst, p0, p1);
  kv_->seq_cp(src, dst, p0, p1);
  if (kv_swa_) kv_swa_->seq_cp(src, dst, p0, p1);
}
void Context::seq_keep(int32_t seq) {
  if (state_) return state_->seq_keep(seq);
  kv_->seq_keep(seq);
  if (kv_swa_) kv_swa_->seq_keep(seq);
}
int32_t Context::seq_reusable_prefix(int32_t seq, int32_t n) const {
  return state_ ? state_->reusable_prefix(seq, n) : n;
}

KvCache& Context::kv_cache() {
  if (!kv_) fail("{}: a recurrent model has no KV cache (its state is per sequence)", model_.hparams().arch);
  return *kv_;
}
RecurrentState& Context::recurrent_state() {
  if (!state_) fail("{}: an attention model has no recurrent state", model_.hparams().arch);
  return *state_;
}

void Context::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
  if (state_) return state_->seq_add(seq, p0, p1, delta);
  for (KvCache* kv : {kv_.get(), kv_swa_.get()}) {
    if (!kv) continue;
    const std::vector<int32_t> moved = kv->seq_add(seq, p0, p1, delta);
    if (!moved.empty()) rotate_keys(*kv, model_, moved, delta);
  }
}

const float* Context::logits(int64_t i) const {
  if (hidden_) fail("no logits: the last decode was decode_embeddings()");
  if (i < 0 || i >= n_outputs_) fail("no logits for output {} (the last decode produced {})", i, n_outputs_);
  return logits_.data() + size_t(i) * size_t(n_vocab());
}

const float* Context::embedding(int64_t i) const {
  if (!hidden_) fail("no embeddings: the last decode was decode(), not decode_embeddings()");
  if (i < 0 || i >= n_outputs_) fail("no embedding for output {} (the last decode produced {})", i, n_outputs_);
  return logits_.data() + size_t(i) * size_t(n_embd());
}

std::unique_ptr<Graph> Context::build_graph(int64_t T, int64_t n_out, GraphInputs& in, Tensor*& logits,
                                            bool hidden) const {
  auto g = std::make_unique<Graph>();
  in.tokens = g->new_leaf("inp_tokens", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  in.positions = g->new_leaf("inp_pos", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  in.token_info = g->new_leaf("inp_token_info", DType::I32, {2, T, 1, 1}, TensorRole::Input);
  in.store_cells = g->new_leaf("inp_store_cells", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  if (n_out < T) in.out_ids = g->new_leaf("inp_out_ids", DType::I32, {n_out, 1, 1, 1}, TensorRole::Input);
  if (state_) {
    in.state_slots = g->new_leaf("inp_state_slots", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
    for (int64_t il = 0; il < model_.hparams().n_layer; ++il) {
      in.shift_att.push_back(g->external(state_->shift_att(il)));
      in.shift_ffn.push_back(g->external(state_->shift_ffn(il)));
      in.wkv_state.push_back(g->external(state_->wkv(il)));
    }
  } else {
    in.cell_info = g->external(kv_->cell_info());
    if (kv_swa_) {
      in.swa_store_cells = g->new_leaf("inp_swa_store_cells", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
      in.swa_cell_info = g->external(kv_swa_->cell_info());
    }
  }
  for (int64_t il = 0; il < model_.hparams().n_layer && kv_; ++il) {
    KvCache& kv = kv_swa_ && kv_swa_->has_layer(il) ? *kv_swa_ : *kv_;
    const bool own = kv.has_layer(il);  // a layer without K/V of its own (Gemma 4) reads an earlier layer's
    in.k_cache.push_back(own ? g->external(kv.k(il)) : nullptr);
    in.v_cache.push_back(own ? g->external(kv.v(il)) : nullptr);
  }
  in.flash_attn = flash_;
  BuildContext c{*g, model_, model_.hparams(), in, T, hidden};
  logits = model_.arch().build(c);
  g->mark_output(logits);
  return g;
}

void Context::reserve() {
  if (!arena_.empty()) return;
  // The worst cases of the configured batch: a full ubatch with every logit,
  // with all but one (the most output ids), and with one, and the 1-token
  // decode graph (placement may differ by shape).
  const int64_t U = state_ ? params_.n_ubatch : std::min(params_.n_ubatch, params_.n_ctx);
  const Scheduler sched(model_.registry());
  ComputeNeeds needs;
  for (const auto& [T, n_out] : {std::pair<int64_t, int64_t>{U, U}, {U, std::max<int64_t>(U - 1, 1)}, {U, 1}, {1, 1}}) {
    GraphInputs in;
    Tensor* logits = nullptr;
    needs.merge(sched.measure(build_graph(T, n_out, in, logits)));
  }
  arena_.reserve(needs);
}

Context::Bucket& Context::get_bucket(int64_t T, int64_t n_out, bool hidden) {
  if (T <= 0 || n_out <= 0 || n_out > T)
    fail("no graph for {} tokens with {} outputs (want 1 <= outputs <= tokens)", T, n_out);
  auto key = std::make_tuple(T, n_out, hidden);
  auto it = buckets_.find(key);
  if (it != buckets_.end()) {
    it->second->last_used = ++use_clock_;
    return *it->second;
  }
  reserve();
  if (buckets_.size() >= size_t(params_.n_graphs)) {  // evict the least recently used shape
    auto lru = buckets_.begin();
    for (auto b = buckets_.begin(); b != buckets_.end(); ++b)
      if (b->second->last_used < lru->second->last_used) lru = b;
    buckets_.erase(lru);
  }
  auto b = std::make_unique<Bucket>();
  const uint64_t generation = arena_.generation();
  b->sg = Scheduler(model_.registry()).schedule(build_graph(T, n_out, b->in, b->logits, hidden), &arena_);
  if (arena_.generation() != generation) {  // the reserve grew: every other cached graph is stale
    fmt::print(stderr,
               "opal: compute memory reserved for n_ubatch = {} tokens is too small for a graph of {} tokens with {} "
               "outputs; grown once ({})\n",
               params_.n_ubatch, T, n_out, arena_.last_growth());
    buckets_.clear();
  }
  b->last_used = ++use_clock_;
  return *buckets_.emplace(key, std::move(b)).first->second;
}

ScheduledGraph& Context::bucket(int64_t n_tokens, int64_t n_outputs) { return *get_bucket(n_tokens, n_outputs).sg; }

void Context::decode(const Batch& batch) { decode_impl(batch, false); }
void Context::decode_embeddings(const Batch& batch) { decode_impl(batch, true); }

void Context::decode_impl(const Batch& batch, bool hidden) {
  const size_t n = batch.tokens.size();
  if (n == 0) fail("decode: the batch is empty");
  if (batch.pos.size() != n || batch.seq.size() != n || batch.logits.size() != n)
    fail("decode: batch arrays differ in length");
  if (int64_t(n) > params_.n_batch) fail("decode: batch of {} tokens exceeds n_batch = {}", n, params_.n_batch);
  const int64_t nv = n_vocab();
  for (size_t i = 0; i < n; ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= nv)
      fail("token id {} at batch index {} is out of range (n_vocab = {})", batch.tokens[i], i, nv);
    if (batch.pos[i] < 0) fail("position {} at batch index {} is negative", batch.pos[i], i);
    if (batch.seq[i] < 0) fail("sequence id {} at batch index {} is negative", batch.seq[i], i);
  }
  if (int64_t(n) > params_.n_ctx)
    fail("the prompt/batch has {} tokens but the context holds only n_ctx = {}", n, params_.n_ctx);
  std::vector<int32_t> cells;
  if (state_) {  // a recurrent model's context is its positions: n_ctx of them per sequence
    for (size_t i = 0; i < n; ++i)
      if (batch.pos[i] >= params_.n_ctx)
        fail("context is full: position {} of sequence {} (batch index {}) is past n_ctx = {} (raise -c or reset)",
             batch.pos[i], batch.seq[i], i, params_.n_ctx);
    cells = state_->prepare(batch.pos, batch.seq);  // the state slot of each token; throws before any change
  } else {
    cells = kv_->reserve(batch.pos, batch.seq);  // throws if full: nothing changed yet
  }

  int64_t n_out = 0;
  for (uint8_t f : batch.logits) n_out += f != 0;
  hidden_ = hidden;
  logits_.resize(size_t(n_out) * size_t(hidden ? n_embd() : nv));
  n_outputs_ = 0;
  for (size_t b = 0; b < n; b += size_t(params_.n_ubatch)) {
    const size_t e = std::min(n, b + size_t(params_.n_ubatch));
    run_ubatch(batch, b, e, cells);
  }
  n_outputs_ = n_out;
}

void Context::run_ubatch(const Batch& batch, size_t begin, size_t end, const std::vector<int32_t>& cells) {
  const int64_t T = int64_t(end - begin);
  std::vector<int32_t> out_rows;
  for (size_t i = begin; i < end; ++i)
    if (batch.logits[i]) out_rows.push_back(int32_t(i - begin));
  const bool none = out_rows.empty();
  if (none) out_rows.push_back(int32_t(T - 1));  // the graph always yields one row; dropped below
  Bucket& b = get_bucket(T, int64_t(out_rows.size()), hidden_);

  std::vector<int32_t> pos(batch.pos.begin() + long(begin), batch.pos.begin() + long(end));
  std::vector<int32_t> seq(batch.seq.begin() + long(begin), batch.seq.begin() + long(end));
  std::vector<int32_t> ucells(cells.begin() + long(begin), cells.begin() + long(end));
  if (kv_) kv_->commit(ucells, pos, seq);

  std::memcpy(b.in.tokens->data, batch.tokens.data() + begin, size_t(T) * 4);
  std::memcpy(b.in.positions->data, pos.data(), size_t(T) * 4);
  int32_t* ti = static_cast<int32_t*>(b.in.token_info->data);
  for (int64_t t = 0; t < T; ++t) {
    ti[2 * t] = pos[size_t(t)];
    ti[2 * t + 1] = seq[size_t(t)];
  }
  std::memcpy(b.in.store_cells->data, ucells.data(), size_t(T) * 4);
  if (b.in.state_slots) std::memcpy(b.in.state_slots->data, ucells.data(), size_t(T) * 4);
  if (kv_swa_) {  // the sliding layers' cells, found per ubatch (cells out of the window are reused)
    const std::vector<int32_t> swa_cells = kv_swa_->reserve(pos, seq);
    kv_swa_->commit(swa_cells, pos, seq);
    std::memcpy(b.in.swa_store_cells->data, swa_cells.data(), size_t(T) * 4);
  }
  if (b.in.out_ids) std::memcpy(b.in.out_ids->data, out_rows.data(), out_rows.size() * 4);

  b.sg->run(hooks_);
  if (state_) state_->commit(pos, seq, 0, pos.size());

  if (none) return;
  const size_t nv = size_t(hidden_ ? n_embd() : n_vocab());
  b.sg->read(b.logits, logits_.data() + size_t(n_outputs_) * nv, out_rows.size() * nv * sizeof(float));
  n_outputs_ += int64_t(out_rows.size());
}

}  // namespace opal
