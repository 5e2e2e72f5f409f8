// The scheduler: places every node of a graph on a device, cuts the graph
// into per-device segments, inserts copies where a device cannot read a
// source's buffer, plans compute memory once, and runs the result.
//
// Placement rules, in order (each decision keeps its reason):
//   1. a View (or in-place KvStore) stays with the tensor whose bytes it aliases;
//   2. a node that reads a weight or cache goes to the device holding it, if
//      that device supports the node ("weights pull the ops that consume them");
//   3. otherwise the highest-priority device that supports it;
//   4. otherwise the Host-role device (the CPU), by role. If even the host
//      refuses, scheduling fails with an opal::Error listing every reason.
//
// Memory: inputs get their own host bytes; every other computed tensor gets
// an offset in its device's compute buffer, reusing the bytes of tensors
// whose last reader has run (a first-fit plan over the node order). The plan
// and each executor's compiled Plan are built once per ScheduledGraph, i.e.
// once per shape bucket: running never allocates.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/backend.h"
#include "graph/registry.h"

namespace opal {

struct Placement {
  Device* device = nullptr;
  std::string reason;
};

// A copy of a source's bytes into a buffer the consuming device can read,
// performed at the start of the consumer's segment.
struct CrossCopy {
  Tensor* src = nullptr;  // storage tensor (not a view)
  Tensor* dst = nullptr;  // same shape, in the consumer device's compute buffer
  const Device* from = nullptr;  // the device holding src
};

class ScheduledGraph {
 public:
  // Runs every segment in order (copies first). Allocation-free.
  void run(RunHooks* hooks = nullptr);

  const Graph& graph() const { return *graph_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const Placement& placement(const Tensor* node) const;
  const std::vector<CrossCopy>& copies_before(size_t segment) const { return copies_[segment]; }
  size_t n_copies() const;
  uint64_t bytes_copied_per_run() const;
  // Compute bytes planned per device name (excluding inputs).
  const std::map<std::string, uint64_t>& compute_bytes() const { return compute_bytes_; }

  // Reads a tensor's bytes to host memory wherever it lives.
  void read(const Tensor* t, void* dst, uint64_t nbytes) const;
  // Counts how many ScheduledGraphs (memory plans) were ever built in this
  // process; tests use it to prove decode does not re-plan per token.
  static uint64_t plans_built();

 private:
  friend class Scheduler;
  std::unique_ptr<Graph> graph_;
  std::deque<Tensor> extra_;  // copy destinations and re-pointed views
  std::map<const Tensor*, Placement> placement_;
  std::vector<Segment> segments_;
  std::vector<std::vector<CrossCopy>> copies_;
  std::vector<std::unique_ptr<Plan>> plans_;
  std::vector<std::unique_ptr<HostFallback>> fallbacks_;  // one per accelerator segment the host can read
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::map<std::string, uint64_t> compute_bytes_;
  std::vector<uint8_t> staging_;  // for copies between two non-host buffers
};

class Scheduler {
 public:
  explicit Scheduler(Registry& registry) : registry_(registry) {}

  // Chooses the device for each weight of a (representative) graph: the
  // highest-priority device whose supports_weight() accepts it, else the host.
  std::map<const Tensor*, Placement> place_weights(const Graph& graph) const;

  // Places, splits, plans memory and compiles. Takes ownership of the graph.
  std::unique_ptr<ScheduledGraph> schedule(std::unique_ptr<Graph> graph) const;

  Registry& registry() const { return registry_; }

 private:
  Placement place_node(const Tensor& node, const std::map<const Tensor*, Placement>& placed) const;
  Registry& registry_;
};

// The device holding a leaf's bytes, found through the registry (null for a
// leaf without a buffer).
Device* device_of(const Registry& reg, const Tensor& t);

}  // namespace opal
