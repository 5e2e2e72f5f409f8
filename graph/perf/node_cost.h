// The work one graph node does, for perf events, summaries and placement
// reports: floating-point operations and bytes moved (read + written),
// counted the same way for every backend so that figures compare.
//
// Conventions: a multiply-add is 2 FLOPs; bytes are the bytes of every source
// as stored (a quantized weight counts its quantized bytes) plus the output.
// MUL_MAT_ID reads the experts it uses (at most n_used * T of them);
// ATTENTION counts every cell of the cache it scans (an upper bound: causal
// masking skips some). Views and leaves cost nothing.
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace opal {

struct NodeCost {
  double flops = 0;
  uint64_t bytes = 0;
};

NodeCost node_cost(const Tensor& node);

}  // namespace opal
