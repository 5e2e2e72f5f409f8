// Shadow compare: re-runs every node that a non-CPU backend executed on the
// CPU reference, from the same inputs read back to host memory, and records
// the first node whose output diverges beyond the op/dtype tolerance
// (tolerance.h). One RunHooks decorator for every backend and every op: it
// clones the node's descriptor, points its sources at host copies of their
// bytes and calls the CPU backend's compute for that one node.
//
// Costs: per shadowed node, a copy of every source to host memory and one
// CPU evaluation (single-threaded unless n_threads says otherwise). It is a
// debugging mode (`--shadow`), never on by default.
//
// Not compared: KV_STORE (its result is the cache itself, written in place;
// the ATTENTION reading it is compared instead) and nodes the CPU does not
// support (counted as skipped).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/backend.h"
#include "graph/thread_pool.h"

namespace opal {

struct ShadowDivergence {
  std::string tensor, op, backend, kernel, shape;
  double nmse = 0, max_abs = 0, tolerance = 0;
  uint64_t node_index = 0;  // how many shadowed nodes ran before it
};

class ShadowCompare : public RunHooks {
 public:
  explicit ShadowCompare(int n_threads = 1);
  ~ShadowCompare() override;
  void after_node(const Device& dev, const Tensor& node, const char* kernel) override;
  bool reads_node_memory() const override { return true; }

  uint64_t compared() const { return compared_; }
  uint64_t skipped() const { return skipped_; }
  bool diverged() const { return first_ != nullptr; }
  const ShadowDivergence* first_divergence() const { return first_.get(); }
  // Worst NMSE / tolerance ratio seen among nodes that passed (how close to failing).
  double worst_ratio() const { return worst_ratio_; }
  // "shadow: 15 nodes compared ...; first divergence: ..." (one line).
  std::string report() const;

 private:
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::vector<uint8_t>> src_bytes_;
  std::vector<uint8_t> out_bytes_, dev_bytes_, work_;
  std::vector<float> out_f32_, ref_f32_;
  uint64_t compared_ = 0, skipped_ = 0;
  double worst_ratio_ = 0;
  std::unique_ptr<ShadowDivergence> first_;
};

}  // namespace opal
