// One ATTENTION node (backends/cpu/ops/attention.cpp) over buffers the caller owns, built and computed on the
// CPU backend: the set-up the attention tests (tests/kernels/test_attn_batched.cpp,
// tests/engine/test_attention_split.cpp, tests/et_kernels/test_et_ops.cpp) and benchmarks (bench/attn_blocks.cpp,
// bench/attn_decode.cpp) share.
// Header-only and free of GoogleTest.
//
// Shapes: q [d, hq, tokens] f32; out [d * hq, tokens] f32; K and V [hkv * d, cells] of their types; the tokens'
// and the cells' (position, sequence) pairs, a cell's position -1 when it is empty.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/ops/ops.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"

namespace opal::test {

inline Tensor host_tensor(DType t, void* data, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, ne2, 1};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

// (position, sequence) pairs of n consecutive positions from `first`, all of sequence 0.
inline std::vector<int32_t> seq0_positions(int64_t n, int64_t first = 0) {
  std::vector<int32_t> pairs(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) pairs[size_t(2 * i)] = int32_t(first + i), pairs[size_t(2 * i + 1)] = 0;
  return pairs;
}

struct AttentionArgs {
  int64_t hq = 0, hkv = 0, d = 0;  // query heads, kv heads, head size (K and V)
  float scale = 0.0f;              // of the scores; 0: 1 / sqrt(d)
  int32_t window = 0;              // sliding window (0: none)
  bool flash = false;              // -fa 1
};

class AttentionNode {
 public:
  AttentionNode(const AttentionArgs& a, const float* q, float* out, DType tk, const void* k, DType tv, const void* v,
                std::vector<int32_t> tokens, std::vector<int32_t> cells)
      : tok_(std::move(tokens)), info_(std::move(cells)) {
    const int64_t n_tokens = int64_t(tok_.size() / 2), n_cells = int64_t(info_.size() / 2), e = a.hkv * a.d;
    q_ = host_tensor(DType::F32, const_cast<float*>(q), a.d, a.hq, n_tokens);
    k_ = host_tensor(tk, const_cast<void*>(k), e, n_cells);
    v_ = host_tensor(tv, const_cast<void*>(v), e, n_cells);
    tokens_ = host_tensor(DType::I32, tok_.data(), 2, n_tokens);
    cells_ = host_tensor(DType::I32, info_.data(), 2, n_cells);
    node_ = host_tensor(DType::F32, out, a.d * a.hq, n_tokens);
    node_.op = Op::Attention;
    node_.src[kAttnQ] = &q_;
    node_.src[kAttnK] = &k_;
    node_.src[kAttnV] = &v_;
    node_.src[kAttnTokens] = &tokens_;
    node_.src[kAttnCells] = &cells_;
    node_.iparams[0] = int32_t(a.hkv);
    node_.iparams[1] = a.window;
    node_.iparams[2] = a.flash ? 1 : 0;
    node_.fparams[0] = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(a.d));
  }
  AttentionNode(const AttentionNode&) = delete;  // the node points into this object
  AttentionNode& operator=(const AttentionNode&) = delete;

  // Why the CPU backend declines the node; empty when it runs it.
  std::string unsupported() const {
    const auto s = cpu::supports(node_);
    return s.ok ? std::string() : s.reason;
  }
  // Computes the node on `pool`, with a work buffer sized for the pool on first use.
  void compute(ThreadPool& pool) {
    const size_t need = cpu::work_size(node_, pool.size()) + 64;
    if (work_.size() < need) work_.resize(need);
    uint8_t* aligned = work_.data() + (64 - reinterpret_cast<uintptr_t>(work_.data()) % 64) % 64;
    cpu::compute(node_, cpu::OpContext{pool, aligned});
  }
  // Computes the node on a fresh pool of `threads` OS threads.
  void compute(int threads) {
    ThreadPool pool(threads);
    compute(pool);
  }
  // Points the node at another copy of the cache (same shape and types).
  void set_cache(const void* k, const void* v) { k_.data = const_cast<void*>(k), v_.data = const_cast<void*>(v); }

 private:
  std::vector<int32_t> tok_, info_;
  Tensor q_, k_, v_, tokens_, cells_, node_;
  std::vector<uint8_t> work_;
};

// Computes the node into a fresh output (its floats -7 before the call) on `threads` OS threads.
inline std::vector<float> attention_output(const AttentionArgs& a, const float* q, DType tk, const void* k, DType tv,
                                           const void* v, const std::vector<int32_t>& tokens,
                                           const std::vector<int32_t>& cells, int threads) {
  std::vector<float> out(size_t(a.d * a.hq) * (tokens.size() / 2), -7.0f);
  AttentionNode node(a, q, out.data(), tk, k, tv, v, tokens, cells);
  node.compute(threads);
  return out;
}

}  // namespace opal::test
