// A loaded model: hyperparameters, its architecture, and its weights, each in
// the weight buffer of the device the scheduler chose for it.
//
// Loading validates every tensor the architecture declares (missing tensor,
// wrong shape, unusable type -> opal::Error naming the tensor, the expected
// and the found shape). Weights in host-visible buffers alias the mmap'd file;
// tensors the GGUF reader marked flat_blocks (rows that are not whole blocks,
// as in the old stories260K Q8_0 file) are dequantized to F32 at load as one
// flat block stream.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "graph/registry.h"
#include "graph/scheduler.h"
#include "models/hparams.h"

namespace opal {

struct Architecture;

struct LoadOptions {
  LoadMode load_mode = default_load_mode();  // core/mapped_file.h
  // Let the weights' buffer types repack weights at load into the layout
  // their kernels stream best (BufferType::repack_layout; the CPU's row
  // groups); false keeps every weight's GGUF bytes (--no-repack / -nr).
  bool repack = true;
};

class Model {
 public:
  // The registry must outlive the model.
  static std::unique_ptr<Model> load(const std::string& path, Registry& registry, const LoadOptions& opts = {});
  ~Model();

  const HParams& hparams() const { return hp_; }
  const Architecture& arch() const { return *arch_; }
  const gguf::File& gguf() const { return *file_; }
  Registry& registry() const { return registry_; }
  const std::string& path() const { return path_; }

  // A declared weight, or null for an absent optional one.
  Tensor* weight(const std::string& name) const;
  // Same, but throws naming the tensor when absent.
  Tensor& require(const std::string& name) const;
  const std::map<std::string, Tensor*>& weights() const { return by_name_; }
  // Where each weight went and why.
  const std::map<const Tensor*, Placement>& weight_placement() const { return weight_placement_; }
  // Weights repacked at load (Tensor::layout != 0) and their bytes.
  int n_repacked() const { return n_repacked_; }
  uint64_t repacked_bytes() const { return repacked_bytes_; }

 private:
  explicit Model(Registry& r) : registry_(r) {}
  void repack_weights(const Graph& probe);
  friend class TensorTable;
  Registry& registry_;
  std::string path_;
  std::unique_ptr<gguf::File> file_;
  HParams hp_;
  const Architecture* arch_ = nullptr;
  std::deque<Tensor> tensors_;
  std::map<std::string, Tensor*> by_name_;
  std::map<const Tensor*, Placement> weight_placement_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::vector<float>> dequantized_;  // flat_blocks tensors converted at load
  int n_repacked_ = 0;
  uint64_t repacked_bytes_ = 0;
};

}  // namespace opal
