// One layer's ATTENTION node (backends/cpu/ops/attention.cpp) over buffers the benchmark owns, run on one
// thread (or on a pool of n_threads): the setup bench_attn_blocks (prompts at depth) and bench_attn_decode (one token
// at depth) share. Query rows are `tokens` consecutive positions from `first` in sequence 0; the cache holds `cells`
// cells in position order, all of sequence 0 (cell c at position c).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/ops/ops.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"

namespace opal::bench {

inline Tensor host_tensor(DType t, void* data, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, ne2, 1};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

struct AttentionShape {
  int64_t hq, hkv, d;  // query heads, kv heads, head size (K and V)
};

class AttentionCall {
 public:
  // q: [d, hq, tokens] f32; out: [d * hq, tokens] f32; k, v: [hkv * d, cells] of types tk, tv.
  AttentionCall(const AttentionShape& sh, float* q, float* out, int64_t tokens, int64_t first, DType tk, void* k,
                DType tv, void* v, int64_t cells, bool flash, int n_threads = 1)
      : tok_(size_t(2 * tokens)), info_(size_t(2 * cells)), pool_(n_threads) {
    for (int64_t t = 0; t < tokens; ++t) tok_[size_t(2 * t)] = int32_t(first + t), tok_[size_t(2 * t + 1)] = 0;
    for (int64_t c = 0; c < cells; ++c) info_[size_t(2 * c)] = int32_t(c), info_[size_t(2 * c + 1)] = 0;
    const int64_t e = sh.hkv * sh.d;
    q_ = host_tensor(DType::F32, q, sh.d, sh.hq, tokens);
    k_ = host_tensor(tk, k, e, cells);
    v_ = host_tensor(tv, v, e, cells);
    tokens_ = host_tensor(DType::I32, tok_.data(), 2, tokens);
    cells_ = host_tensor(DType::I32, info_.data(), 2, cells);
    node_ = host_tensor(DType::F32, out, sh.d * sh.hq, tokens);
    node_.op = Op::Attention;
    node_.src[kAttnQ] = &q_;
    node_.src[kAttnK] = &k_;
    node_.src[kAttnV] = &v_;
    node_.src[kAttnTokens] = &tokens_;
    node_.src[kAttnCells] = &cells_;
    node_.iparams[0] = int32_t(sh.hkv);
    node_.iparams[2] = flash ? 1 : 0;
    node_.fparams[0] = 1.0f / std::sqrt(float(sh.d));
    work_.resize(cpu::work_size(node_, pool_.size()) + 64);
    aligned_ = work_.data() + (64 - reinterpret_cast<uintptr_t>(work_.data()) % 64) % 64;
  }
  AttentionCall(const AttentionCall&) = delete;  // the node points into this object
  AttentionCall& operator=(const AttentionCall&) = delete;

  // Why the CPU backend declines the node; empty when it runs it.
  std::string unsupported() const {
    const auto s = cpu::supports(node_);
    return s.ok ? std::string() : s.reason;
  }
  void run() { cpu::compute(node_, cpu::OpContext{pool_, aligned_}); }
  // Point the node at another copy of the cache (same shape and types).
  void set_cache(void* k, void* v) { k_.data = k, v_.data = v; }

 private:
  std::vector<int32_t> tok_, info_;
  Tensor q_, k_, v_, tokens_, cells_, node_;
  ThreadPool pool_;
  std::vector<uint8_t> work_;
  uint8_t* aligned_ = nullptr;
};

}  // namespace opal::bench
