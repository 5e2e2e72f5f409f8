// One layer's ATTENTION node (backends/cpu/ops/attention.cpp) over buffers the benchmark owns, run on one
// thread (or on a pool of n_threads): the setup bench_attn_blocks (prompts at depth) and bench_attn_decode (one token
// at depth) share. Query rows are `tokens` consecutive positions from `first` in sequence 0; the cache holds `cells`
// cells in position order, all of sequence 0 (cell c at position c).
#pragma once
#include <cstdint>
#include <string>

#include "graph/thread_pool.h"
#include "tests/support/attention_node.h"

namespace opal::bench {

struct AttentionShape {
  int64_t hq, hkv, d;  // query heads, kv heads, head size (K and V)
};

// The node (tests/support/attention_node.h) and the pool it runs on, kept between runs.
class AttentionCall {
 public:
  // q: [d, hq, tokens] f32; out: [d * hq, tokens] f32; k, v: [hkv * d, cells] of types tk, tv.
  AttentionCall(const AttentionShape& sh, float* q, float* out, int64_t tokens, int64_t first, DType tk, void* k,
                DType tv, void* v, int64_t cells, bool flash, int n_threads = 1)
      : pool_(n_threads),
        node_({sh.hq, sh.hkv, sh.d, 0.0f, 0, flash}, q, out, tk, k, tv, v, test::seq0_positions(tokens, first),
              test::seq0_positions(cells)) {}

  // Why the CPU backend declines the node; empty when it runs it.
  std::string unsupported() const { return node_.unsupported(); }
  void run() { node_.compute(pool_); }
  // Point the node at another copy of the cache (same shape and types).
  void set_cache(void* k, void* v) { node_.set_cache(k, v); }

 private:
  ThreadPool pool_;
  test::AttentionNode node_;
};

}  // namespace opal::bench
