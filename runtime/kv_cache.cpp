#include "runtime/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace opal {

KvCache::KvCache(const HParams& hp, int64_t n_cells, DType type_k, DType type_v, BufferType& bt,
                 std::vector<uint8_t> layers, int64_t window)
    : n_cells_(n_cells), type_(type_k), type_v_(type_v), window_(window) {
  for (DType type : {type_k, type_v})
    if (type != DType::F16 && type != DType::F32 && type != DType::BF16 && type != DType::Q8_0 && type != DType::Q4_0)
      fail("KV cache type {} is not supported (use f16, bf16, f32, q8_0 or q4_0)", dtype_name(type));
  if (n_cells <= 0) fail("context size must be positive, got {}", n_cells);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (dtype_traits(type_k).quantized && hp.head_dim_k_at(il) % block_size(type_k) != 0)
      fail("KV cache type {} for K: layer {}'s head size {} is not a multiple of {} (use f16)", dtype_name(type_k), il,
           hp.head_dim_k_at(il), block_size(type_k));
    if (dtype_traits(type_v).quantized && hp.head_dim_v_at(il) % block_size(type_v) != 0)
      fail("KV cache type {} for V: layer {}'s head size {} is not a multiple of {} (use f16)", dtype_name(type_v), il,
           hp.head_dim_v_at(il), block_size(type_v));
  }
  k_.resize(size_t(hp.n_layer));
  v_.resize(size_t(hp.n_layer));
  auto init = [&](Tensor& t, const std::string& name, int64_t e, DType type) {
    t.name = name;
    t.type = type;
    t.ne = {e, n_cells, 1, 1};
    t.nb = contiguous_strides(type, t.ne);
    t.role = TensorRole::Cache;
    buffers_.push_back(bt.allocate(t.nbytes()));
    t.buffer = buffers_.back().get();
    t.data = t.buffer->base();
  };
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (!layers.empty() && !layers[size_t(il)]) continue;  // held by another cache
    if (!hp.has_kv(il)) continue;                          // reads an earlier layer's K/V (Gemma 4)
    init(k_[size_t(il)], fmt::format("cache_k.{}", il), hp.n_embd_k_gqa(il), type_k);
    init(v_[size_t(il)], fmt::format("cache_v.{}", il), hp.n_embd_v_gqa(il), type_v);
  }
  cell_info_.name = "kv_cells";
  cell_info_.type = DType::I32;
  cell_info_.ne = {2, n_cells, 1, 1};
  cell_info_.nb = contiguous_strides(DType::I32, cell_info_.ne);
  cell_info_.role = TensorRole::Cache;
  buffers_.push_back(bt.allocate(cell_info_.nbytes()));
  cell_info_.buffer = buffers_.back().get();
  cell_info_.data = cell_info_.buffer->base();
  clear();
}

void KvCache::clear() {
  for (int64_t c = 0; c < n_cells_; ++c) {
    info()[2 * c] = -1;
    info()[2 * c + 1] = -1;
  }
}

std::vector<std::vector<uint8_t>> KvCache::save() const {
  std::vector<std::vector<uint8_t>> out(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    out[i].resize(size_t(buffers_[i]->size()));
    buffers_[i]->read(0, out[i].data(), out[i].size());
  }
  return out;
}

void KvCache::restore(const std::vector<std::vector<uint8_t>>& saved) {
  if (saved.size() != buffers_.size())
    fail("KV cache restore: {} buffers saved, the cache has {}", saved.size(), buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (saved[i].size() != buffers_[i]->size())
      fail("KV cache restore: buffer {} was saved with {} bytes, the cache's has {}", i, saved[i].size(),
           buffers_[i]->size());
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i]->write(0, saved[i].data(), saved[i].size());
}

uint64_t KvCache::bytes() const {
  uint64_t b = 0;
  for (size_t il = 0; il < k_.size(); ++il)
    if (k_[il].data) b += k_[il].nbytes() + v_[il].nbytes();
  return b;
}

int64_t KvCache::n_free() const {
  int64_t n = 0;
  for (int64_t c = 0; c < n_cells_; ++c) n += info()[2 * c + 1] < 0;
  return n;
}

std::vector<int32_t> KvCache::reserve(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq) {
  std::vector<int32_t> cells;
  cells.reserve(pos.size());
  // Sliding window: a cell out of the window of its sequence's next position is free too.
  std::vector<std::pair<int32_t, int32_t>> pos_max;  // (seq, pos_max) of the sequences in the cache
  if (window_ > 0)
    for (int64_t c = 0; c < n_cells_; ++c) {
      const int32_t s = info()[2 * c + 1];
      if (s < 0) continue;
      auto it = std::find_if(pos_max.begin(), pos_max.end(), [s](const auto& e) { return e.first == s; });
      if (it == pos_max.end()) pos_max.push_back({s, info()[2 * c]});
      else it->second = std::max(it->second, info()[2 * c]);
    }
  auto free_cell = [&](int64_t c) {
    const int32_t s = info()[2 * c + 1];
    if (s < 0) return true;
    if (window_ <= 0) return false;
    for (const auto& [ps, pm] : pos_max)
      if (ps == s) return int64_t(pm) + 1 - int64_t(info()[2 * c]) >= window_;
    return false;
  };
  for (int64_t c = 0; c < n_cells_ && cells.size() < pos.size(); ++c)
    if (free_cell(c)) cells.push_back(int32_t(c));
  if (cells.size() < pos.size()) {
    if (window_ > 0)
      fail(
          "the sliding-window KV cache is full: {} cells, the ubatch needs {} (the cache holds window {} + ubatch "
          "cells per sequence; fewer parallel sequences or a smaller ubatch)",
          n_cells_, pos.size(), window_);
    fail("context is full: n_ctx = {}, {} cells in use, the batch needs {} more (raise -c or reset)", n_cells_,
         n_cells_ - n_free(), pos.size());
  }
  return cells;
}

void KvCache::commit(const std::vector<int32_t>& cells, const std::vector<int32_t>& pos,
                     const std::vector<int32_t>& seq) {
  for (size_t i = 0; i < cells.size(); ++i) {
    info()[2 * cells[i]] = pos[i];
    info()[2 * cells[i] + 1] = seq[i];
  }
}

void KvCache::remove_seq(int32_t s) {
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] == s) info()[2 * c] = info()[2 * c + 1] = -1;
}

namespace {
bool in_range(int32_t p, int32_t p0, int32_t p1) { return p >= p0 && (p1 < 0 || p < p1); }
}  // namespace

void KvCache::seq_rm(int32_t s, int32_t p0, int32_t p1) {
  if (p0 < 0) p0 = 0;
  for (int64_t c = 0; c < n_cells_; ++c) {
    const int32_t cs = info()[2 * c + 1];
    if (cs >= 0 && (s < 0 || cs == s) && in_range(info()[2 * c], p0, p1)) info()[2 * c] = info()[2 * c + 1] = -1;
  }
}

void KvCache::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (src == dst) return;
  if (p0 < 0) p0 = 0;
  std::vector<int32_t> from;
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] == src && in_range(info()[2 * c], p0, p1)) from.push_back(int32_t(c));
  std::vector<int32_t> to;
  for (int64_t c = 0; c < n_cells_ && to.size() < from.size(); ++c)
    if (info()[2 * c + 1] < 0) to.push_back(int32_t(c));
  if (to.size() < from.size())
    fail("context is full: copying {} cells of sequence {} to sequence {} needs {} free cells, {} are free",
         from.size(), src, dst, from.size(), to.size());
  auto copy_rows = [&](Tensor& t) {
    if (!t.data) return;  // a layer this cache does not hold (the other cache of a sliding-window model has it)
    for (size_t i = 0; i < from.size(); ++i)
      t.buffer->write(uint64_t(to[i]) * t.nb[1], static_cast<const uint8_t*>(t.data) + uint64_t(from[i]) * t.nb[1],
                      t.nb[1]);
  };
  for (Tensor& t : k_) copy_rows(t);
  for (Tensor& t : v_) copy_rows(t);
  for (size_t i = 0; i < from.size(); ++i) {
    info()[2 * to[i]] = info()[2 * from[i]];
    info()[2 * to[i] + 1] = dst;
  }
}

void KvCache::seq_keep(int32_t s) {
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] != s) info()[2 * c] = info()[2 * c + 1] = -1;
}

std::vector<int32_t> KvCache::seq_add(int32_t s, int32_t p0, int32_t p1, int32_t delta) {
  std::vector<int32_t> moved;
  if (delta == 0) return moved;
  if (p0 < 0) p0 = 0;
  for (int64_t c = 0; c < n_cells_; ++c) {
    if (info()[2 * c + 1] != s || !in_range(info()[2 * c], p0, p1)) continue;
    const int64_t p = int64_t(info()[2 * c]) + delta;
    if (p < 0) {
      info()[2 * c] = info()[2 * c + 1] = -1;
    } else {
      info()[2 * c] = int32_t(p);
      moved.push_back(int32_t(c));
    }
  }
  return moved;
}

int32_t KvCache::seq_pos_min(int32_t s) const {
  int32_t m = -1;
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] == s && (m < 0 || info()[2 * c] < m)) m = info()[2 * c];
  return m;
}

int32_t KvCache::seq_pos_max(int32_t s) const {
  int32_t m = -1;
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] == s) m = std::max(m, info()[2 * c]);
  return m;
}

bool KvCache::has_cell(int32_t s, int32_t p) const {
  for (int64_t c = 0; c < n_cells_; ++c)
    if (info()[2 * c + 1] == s && info()[2 * c] == p) return true;
  return false;
}

}  // namespace opal
