// How far a backend's output may stray from the CPU reference, per op and
// dtype. The measure is ggml's test-backend-ops one, the normalized mean
// squared error NMSE = sum (out - ref)^2 / sum ref^2, which does not depend on
// the scale of the values. Used by the shadow compare and by the conformance
// test, so both judge a backend alike.
//
// The limits are a column of each op's row in the op-info table
// (graph/op_info.cpp, which says where each number comes from).
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace opal {

// The largest NMSE accepted for this node's output.
double max_nmse(const Tensor& node);

struct ErrorStats {
  double nmse = 0;
  double max_abs = 0;      // max |out - ref|
  int64_t first_bad = -1;  // index of the first non-finite mismatch, if any
};

// out and ref hold n values (the node's elements as f32).
ErrorStats compare_outputs(const float* out, const float* ref, int64_t n);

// The node's output bytes (at host address data, in its own strides) as n_elements f32.
void tensor_to_f32(const Tensor& t, const void* data, float* dst);

}  // namespace opal
