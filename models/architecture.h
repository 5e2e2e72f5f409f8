// An architecture = a tensor declaration + a graph builder, one file each
// (models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp), listed in the table
// in models/architecture.cpp. Shared builders live in models/builders.h.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/hparams.h"

namespace opal {

class Model;
class TensorTable;

// The per-run inputs and caches a graph reads. Built by the runtime.
struct GraphInputs {
  Tensor* tokens = nullptr;      // I32 [T]
  Tensor* positions = nullptr;   // I32 [T]
  Tensor* token_info = nullptr;  // I32 [2, T]: (pos, seq)
  Tensor* cell_info = nullptr;   // I32 [2, n_cells]: (pos, seq), seq -1 = empty
  Tensor* store_cells = nullptr; // I32 [T]: the cache cell each token is written to
  Tensor* out_ids = nullptr;     // I32 [n_out]: rows whose logits are wanted, null = all
  std::vector<Tensor*> k_cache, v_cache;  // per layer [E, n_cells]
};

struct BuildContext {
  Graph& g;
  const Model& model;
  const HParams& hp;
  const GraphInputs& in;
  int64_t n_tokens = 0;
};

struct Architecture {
  std::string name;
  RopeMode rope_mode = RopeMode::Normal;
  // Declares (and validates) every tensor the architecture reads.
  void (*declare_tensors)(TensorTable& table, const HParams& hp) = nullptr;
  // Builds the forward graph; returns the logits [n_vocab, n_out].
  Tensor* (*build)(BuildContext& ctx) = nullptr;
};

// Throws opal::Error naming the architecture and listing the known ones.
const Architecture& find_architecture(const std::string& name);
std::vector<std::string> architecture_names();

}  // namespace opal
