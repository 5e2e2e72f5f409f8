// One-op graphs for probing and testing backends: the op support matrix
// (`opal ops`) asks every backend's supports() about them, and the
// conformance runner (conformance.h) runs them on every backend and on the
// scalar reference and compares.
//
// A case is (op, dtype, shape, variant). dtype is the type that matters for
// the op: the weight type for MUL_MAT / MUL_MAT_ID / GET_ROWS, the cache type
// for ATTENTION / KV_STORE, the output type for CPY, the input type for the
// rest. Shapes: m = tokens (activation rows), n = output rows (weight rows,
// table rows, heads), k = row length (reduction length).
//
// build_case() adds the leaves and the node to a graph; weights come with
// their host bytes (to upload to a device), inputs are filled after
// scheduling by fill(). The same case and seed always give the same bytes.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace opal {

struct OpCase {
  Op op = Op::MulMat;
  DType dtype = DType::F32;
  int64_t m = 1, n = 1, k = 1;
  int variant = 0;            // ROPE: 0 normal, 1 neox; UNARY: the UnaryFn; ATTENTION: > 0 a sliding window;
                              // NORM: 1 with weight and bias
  std::string label() const;  // "MUL_MAT q8_0 m=7 n=33 k=256"
};

struct BuiltCase {
  Tensor* out = nullptr;
  struct Weight {
    Tensor* tensor = nullptr;
    std::vector<uint8_t> bytes;  // GGUF layout, tensor->nbytes()
  };
  std::vector<Weight> weights;
  // Writes every input's bytes (call after scheduling, when inputs have data).
  std::function<void()> fill;
};

// Throws opal::Error when the graph cannot express the case (e.g. RMS_NORM of
// f16) or no reference quantizer makes the weight's bytes.
// with_data = false skips making the weights' bytes (enough for supports()).
BuiltCase build_case(const OpCase& c, Graph& g, uint32_t seed, bool with_data = true);

// The ops in the closed op set that compute (no None/View), in enum order.
std::vector<Op> computing_ops();
// The dtypes the support matrix shows for an op.
std::vector<DType> matrix_dtypes(Op op);
// A small representative case (for supports()).
OpCase probe_case(Op op, DType dtype);

}  // namespace opal
