// The KV cache: per layer a K and a V tensor of [n_embd_{k,v}_gqa, n_cells]
// in f16 (default, as llama.cpp), bf16, f32, q8_0 or q4_0 (K and V each their
// own type; a quantized row is whole 32-element blocks, quantized when the
// token is stored, so each head's part must be whole blocks), in host memory, plus per-cell
// metadata (pos, seq). Cells are handed out first-free; a sequence's cells
// need not be contiguous. The metadata is kept in an I32 [2, n_cells] tensor
// that the attention op reads directly.
//
// A cache may hold only some layers (`layers`): a model with sliding-window
// layers (Gemma) gets one cache of n_ctx cells for its global layers and one
// of about window + ubatch cells for its sliding layers (llama.cpp's
// llama_kv_cache_iswa, unless --swa-full). In a sliding cache (window W > 0)
// a cell whose position p is out of every future query's window (p <=
// pos_max(seq) + 1 - W) is free for reuse when cells are reserved, as in
// llama.cpp's find_slot; the cell keeps its data until then.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "graph/backend.h"
#include "models/hparams.h"

namespace opal {

class KvCache {
 public:
  // layers: which layers this cache holds (empty: all); window: > 0 for a sliding-window cache.
  // type_k / type_v: f16, bf16, f32, q8_0 or q4_0; throws opal::Error for another type or, quantized, a head
  // size that is not a whole number of blocks.
  KvCache(const HParams& hp, int64_t n_cells, DType type_k, DType type_v, BufferType& buffer_type,
          std::vector<uint8_t> layers = {}, int64_t window = 0);

  int64_t n_cells() const { return n_cells_; }
  DType type() const { return type_; }  // K's
  DType type_v() const { return type_v_; }
  Tensor* k(int64_t layer) { return &k_[layer]; }
  Tensor* v(int64_t layer) { return &v_[layer]; }
  bool has_layer(int64_t layer) const { return k_[size_t(layer)].data != nullptr; }
  int64_t window() const { return window_; }
  uint64_t bytes() const;  // K and V bytes of the layers it holds
  Tensor* cell_info() { return &cell_info_; }

  int64_t n_free() const;
  // Reserves one cell per token; throws opal::Error if there is not enough room.
  std::vector<int32_t> reserve(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq);
  // Commits reserved cells (metadata becomes visible to attention).
  void commit(const std::vector<int32_t>& cells, const std::vector<int32_t>& pos, const std::vector<int32_t>& seq);
  void clear();
  void remove_seq(int32_t seq);
  // Frees the cells of `seq` (any sequence if seq < 0) whose position is in
  // [p0, p1); p1 < 0 means "to the end". llama.cpp's llama_memory_seq_rm.
  void seq_rm(int32_t seq, int32_t p0, int32_t p1);
  // Copies the cells of `src` with positions in [p0, p1) into new cells of
  // `dst` (K and V rows included); throws opal::Error when there is no room.
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  // Frees every cell that does not belong to `seq`.
  void seq_keep(int32_t seq);
  // Adds `delta` to the positions of `seq`'s cells in [p0, p1); cells whose
  // position becomes negative are freed. Returns the cells that moved, so the
  // caller can re-rotate their keys (Context::seq_add does).
  std::vector<int32_t> seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
  int32_t seq_pos_min(int32_t seq) const;
  int32_t seq_pos_max(int32_t seq) const;
  bool has_cell(int32_t seq, int32_t pos) const;
  // A copy of the cache's bytes (every buffer: the cells' metadata, K and V of each layer it holds), and its
  // restore into the same cache (opal bench -d: the filled depth, back after a test that slid a window past it).
  // restore() throws opal::Error for a copy of another cache's shape.
  std::vector<std::vector<uint8_t>> save() const;
  void restore(const std::vector<std::vector<uint8_t>>& saved);

 private:
  int32_t* info() { return static_cast<int32_t*>(cell_info_.data); }
  const int32_t* info() const { return static_cast<const int32_t*>(cell_info_.data); }
  int64_t n_cells_;
  DType type_, type_v_;
  int64_t window_ = 0;
  std::vector<Tensor> k_, v_;
  Tensor cell_info_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace opal
