// Declares the tensors an architecture reads and validates them against the
// file: a required tensor that is missing, or any tensor whose shape differs
// from the expected one, is an opal::Error naming the tensor, the expected
// and the found shape.
#pragma once
#include <string>
#include <vector>

#include "core/gguf.h"
#include "graph/graph.h"

namespace opal {

class Model;

class TensorTable {
 public:
  TensorTable(Model& model, const gguf::File& file) : model_(model), file_(file) {}

  Tensor* require(const std::string& name, std::vector<int64_t> shape);
  Tensor* optional(const std::string& name, std::vector<int64_t> shape);
  // Name of a per-layer tensor: layer_name(3, "attn_q") = "blk.3.attn_q.weight".
  static std::string layer(int64_t il, const char* what, const char* suffix = "weight");

 private:
  Tensor* add(const gguf::TensorInfo& info, const std::vector<int64_t>& shape);
  Model& model_;
  const gguf::File& file_;
};

}  // namespace opal
