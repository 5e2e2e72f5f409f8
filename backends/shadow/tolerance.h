// How far a backend's output may stray from the CPU reference, per op and
// dtype. The measure is ggml's test-backend-ops one, the normalized mean
// squared error NMSE = sum (out - ref)^2 / sum ref^2, which does not depend on
// the scale of the values. Used by the shadow compare and by the conformance
// test, so both judge a backend alike.
//
// Where the limits come from:
//   - elementwise ops, norms, softmax, rope in f32: a few ulp of rounding and
//     differently ordered sums: 1e-7 (ggml's default);
//   - MUL_MAT / MUL_MAT_ID: activations are rounded to the weight type's
//     vec_dot type (q8_0, q8_K, f16, bf16) on one side and possibly not on the
//     other; a q8 rounding error is at most 1/254 of a block's max, so the
//     relative error of a dot product stays below ~1e-2 and its square below
//     1e-4; 5e-4 is ggml's limit for matmuls;
//   - ATTENTION with an f16 cache rounds q and the probabilities to f16:
//     5e-4; f32 cache: 1e-6;
//   - CPY / KV_STORE to f16 or bf16: one rounding of the output type: bf16
//     has 8 significant bits (relative error 2^-9, squared ~4e-6): 1e-5.
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace opal {

// The largest NMSE accepted for this node's output.
double max_nmse(const Tensor& node);

struct ErrorStats {
  double nmse = 0;
  double max_abs = 0;  // max |out - ref|
  int64_t first_bad = -1;  // index of the first non-finite mismatch, if any
};

// out and ref hold n values (the node's elements as f32).
ErrorStats compare_outputs(const float* out, const float* ref, int64_t n);

// The node's output bytes (at host address data, in its own strides) as n_elements f32.
void tensor_to_f32(const Tensor& t, const void* data, float* dst);

}  // namespace opal
