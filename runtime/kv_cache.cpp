#include "runtime/kv_cache.h"

#include <fmt/format.h>

#include "core/error.h"

namespace opal {

KvCache::KvCache(const HParams& hp, int64_t n_cells, DType type, BufferType& bt) : n_cells_(n_cells), type_(type) {
  if (type != DType::F16 && type != DType::F32 && type != DType::BF16)
    fail("KV cache type {} is not supported (use f16, bf16 or f32)", dtype_name(type));
  if (n_cells <= 0) fail("context size must be positive, got {}", n_cells);
  k_.resize(size_t(hp.n_layer));
  v_.resize(size_t(hp.n_layer));
  auto init = [&](Tensor& t, const std::string& name, int64_t e) {
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
    init(k_[size_t(il)], fmt::format("cache_k.{}", il), hp.n_embd_k_gqa());
    init(v_[size_t(il)], fmt::format("cache_v.{}", il), hp.n_embd_v_gqa());
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

int64_t KvCache::n_free() const {
  int64_t n = 0;
  for (int64_t c = 0; c < n_cells_; ++c) n += info()[2 * c + 1] < 0;
  return n;
}

std::vector<int32_t> KvCache::reserve(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq) {
  std::vector<int32_t> cells;
  cells.reserve(pos.size());
  for (int64_t c = 0; c < n_cells_ && cells.size() < pos.size(); ++c)
    if (info()[2 * c + 1] < 0) cells.push_back(int32_t(c));
  if (cells.size() < pos.size())
    fail("context is full: n_ctx = {}, {} cells in use, the batch needs {} more (raise -c or reset)", n_cells_,
         n_cells_ - n_free(), pos.size());
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
