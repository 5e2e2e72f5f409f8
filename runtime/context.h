// A context runs a model: KV cache, batches, logits.
//
// decode(batch) evaluates a batch of tokens (any number of sequences, one
// seq id per token), split into ubatches of at most n_ubatch tokens; it
// returns nothing but makes the logits of the flagged tokens available in
// batch order. Compute memory is reserved once, on the first decode, from the
// worst-case graphs of the configured batch (n_ubatch tokens with n_ubatch
// outputs or one, and the 1-token decode graph); the graph of every ubatch
// shape (tokens x outputs) is scheduled into those buffers. The built graphs
// of the most recently used shapes (ContextParams::n_graphs) stay cached, so
// decoding token after token allocates nothing and never re-plans, while a
// server fed ever new shapes keeps a bounded footprint. A shape whose plan
// does not fit the reserve (a bucket() asked for more than n_ubatch tokens)
// grows it once, with a message on stderr, and drops the cached graphs.
// decode_embeddings(batch) is decode() for embeddings: the same batch, cache
// and positions, but the graph stops at the output norm (no LM head) and the
// flagged tokens' hidden states (n_embd floats each) are kept instead of
// logits (pooled in runtime/embedding.h).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "graph/scheduler.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/recurrent_state.h"

namespace opal {

struct GraphInputs;

// Flash attention (llama.cpp's -fa on|off|auto): On runs ATTENTION by tiles of cells with an online softmax
// (never a whole row of scores); Off runs llama.cpp's non-flash arithmetic (materialized scores, bit-identical
// to its CPU backend); Auto is On when the cache is quantized (q8_0, q4_0) and Off otherwise, so a default f16
// context keeps llama.cpp's bits. A quantized V cache needs flash attention (llama.cpp's rule): Off fails.
enum class FlashAttn : uint8_t { Off, On, Auto };

struct ContextParams {
  int64_t n_ctx = 0;               // 0 = the model's training context
  int64_t n_batch = 2048;          // most tokens one decode() call may take
  int64_t n_ubatch = 512;          // most tokens one graph run takes
  DType kv_type = DType::F16;      // the K cache's (-ctk): f16, bf16, f32, q8_0 or q4_0
  std::optional<DType> kv_type_v;  // the V cache's (-ctv); unset: kv_type
  FlashAttn flash_attn = FlashAttn::Auto;
  int n_threads = 0;  // 0 = leave the registry's setting
  int n_graphs = 8;   // most ubatch shapes whose built graphs stay cached (least recently used go)
  // Sliding-window layers (Gemma): their own cache of window * n_seq_max + n_ubatch cells (rounded up to 256,
  // at most n_ctx), as llama.cpp's; swa_full gives them n_ctx cells like the other layers (llama.cpp --swa-full).
  bool swa_full = false;
  // Most sequences decoded at once (the server's slots): the sliding cache keeps a window for each, a recurrent
  // model (RWKV-7) has one state slot for each.
  int n_seq_max = 1;
};

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> logits;  // 1 = return this token's logits
  void add(int32_t token, int32_t position, int32_t seq_id, bool want_logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(seq_id);
    logits.push_back(want_logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
  void clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    logits.clear();
  }
};

class Context {
 public:
  Context(const Model& model, const ContextParams& params);
  ~Context();

  // Throws opal::Error (and leaves the cache as it was) for a token id out of
  // range, an empty or oversize batch, or a full context.
  void decode(const Batch& batch);
  // As decode(), but keeps the hidden state after the output norm of each flagged token.
  void decode_embeddings(const Batch& batch);
  // Logits of the i-th flagged token of the last decode() (n_vocab floats).
  const float* logits(int64_t i) const;
  // Hidden state of the i-th flagged token of the last decode_embeddings() (n_embd floats).
  const float* embedding(int64_t i) const;
  int64_t n_outputs() const { return n_outputs_; }

  void reset();                            // empties the KV cache (all sequences)
  void remove_seq(int32_t seq);            // frees one sequence's cells
  int32_t seq_pos_max(int32_t seq) const;  // -1 if empty
  // -1 if empty. With a sliding-window cache, its smallest position (as llama.cpp's iswa cache): positions
  // below it may be gone from the sliding layers.
  int32_t seq_pos_min(int32_t seq) const;
  // Whether `seq` can go on from position `pos` after its cells at >= pos are removed: every sliding
  // layer still holds the window before pos (llama.cpp's server re-processes the prompt otherwise).
  bool seq_can_resume(int32_t seq, int32_t pos) const;
  // llama.cpp's memory operations (llama_memory_seq_*), on the KV cache:
  // remove [p0, p1) of seq (seq < 0: every sequence; p1 < 0: to the end),
  // copy [p0, p1) of src into dst, drop all but seq, and shift positions
  // [p0, p1) of seq by delta, re-rotating the cached keys so that attention
  // sees them as if computed at their new positions (context shift).
  // For a recurrent model these act on the per-sequence state instead
  // (runtime/recurrent_state.h: what each means for a state, and which throw).
  void seq_rm(int32_t seq, int32_t p0, int32_t p1);
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  void seq_keep(int32_t seq);
  void seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
  // The most of seq's first n positions that seq_rm(seq, m, -1) can keep: n
  // with a KV cache; for a recurrent state a checkpoint's length (or 0).
  int32_t seq_reusable_prefix(int32_t seq, int32_t n) const;
  bool recurrent() const { return state_ != nullptr; }
  // A copy of the whole KV cache (and the sliding layers' cache), restored as it was by restore_cache() (opal
  // bench -d: one fill per depth shared by its tests). Throws opal::Error for a recurrent model.
  struct CacheState {
    std::vector<std::vector<uint8_t>> kv, kv_swa;
  };
  CacheState save_cache() const;
  void restore_cache(const CacheState& saved);

  int64_t n_ctx() const { return params_.n_ctx; }
  int64_t n_vocab() const { return model_.hparams().n_vocab; }
  int64_t n_embd() const { return model_.hparams().n_embd; }
  const ContextParams& params() const { return params_; }
  const Model& model() const { return model_; }
  // The KV cache; throws for a recurrent model, which has none.
  KvCache& kv_cache();
  KvCache* swa_kv_cache() { return kv_swa_.get(); }  // null: no sliding layers, or swa_full
  uint64_t kv_bytes() const { return kv_ ? kv_->bytes() + (kv_swa_ ? kv_swa_->bytes() : 0) : 0; }
  // Whether ATTENTION runs tiled with an online softmax (flash_attn resolved: Auto is On for a quantized cache).
  bool flash_attn() const { return flash_; }
  // One line on the cache, as llama.cpp's "KV self size" line: "KV cache 4.50 MiB (512 cells), K f16, V f16:
  // 9216 bytes per token; flash attention off" (bytes per token over every layer); empty for a recurrent model.
  std::string kv_summary() const;
  // The recurrent state; throws for an attention model.
  RecurrentState& recurrent_state();
  // Number of shape buckets whose graphs are cached now (at most n_graphs).
  size_t n_buckets() const { return buckets_.size(); }
  // The scheduled graph of a bucket (for reports); builds it if needed. The
  // reference is valid until the next bucket() or decode() call.
  ScheduledGraph& bucket(int64_t n_tokens, int64_t n_outputs);
  // Reserves compute memory for the worst-case graphs (done by the first
  // decode() or bucket() call; a no-op once reserved).
  void reserve();
  // Compute bytes reserved per device name ("inputs": the graph inputs); empty before reserve().
  std::map<std::string, uint64_t> compute_reserved() const { return arena_.reserved(); }
  void set_hooks(RunHooks* hooks) { hooks_ = hooks; }

 private:
  struct Bucket;
  Bucket& get_bucket(int64_t n_tokens, int64_t n_outputs, bool hidden = false);
  std::unique_ptr<Graph> build_graph(int64_t n_tokens, int64_t n_outputs, GraphInputs& in, Tensor*& logits,
                                     bool hidden = false) const;
  void decode_impl(const Batch& batch, bool hidden);
  void run_ubatch(const Batch& b, size_t begin, size_t end, const std::vector<int32_t>& cells);

  const Model& model_;
  ContextParams params_;
  bool flash_ = false;
  std::unique_ptr<KvCache> kv_;            // attention models
  std::unique_ptr<KvCache> kv_swa_;        // the sliding-window layers' cache, if separate
  std::unique_ptr<RecurrentState> state_;  // recurrent models
  ComputeArena arena_;                     // declared before the buckets, whose tensors point into it
  std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<Bucket>> buckets_;  // (tokens, outputs, hidden)
  uint64_t use_clock_ = 0;                                                         // for least-recently-used eviction
  std::vector<float> logits_;  // the last decode's outputs: logits, or hidden states if hidden_
  bool hidden_ = false;
  int64_t n_outputs_ = 0;
  RunHooks* hooks_ = nullptr;
};

}  // namespace opal
