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
// and each executor's compiled Plan are built once per ScheduledGraph: running
// never allocates. The buffers are the graph's own, or a ComputeArena's:
// reserved once from a worst-case graph (measure()) and shared by every graph
// scheduled into it, as llama.cpp's ggml_backend_sched_reserve does.
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
  Tensor* src = nullptr;         // storage tensor (not a view)
  Tensor* dst = nullptr;         // same shape, in the consumer device's compute buffer
  const Device* from = nullptr;  // the device holding src
};

class ComputeArena;

// Bytes a graph's memory plan needs: per device (computed tensors) and for
// the host-side inputs.
struct ComputeNeeds {
  std::map<Device*, uint64_t> compute;
  uint64_t inputs = 0;
  BufferType* input_type = nullptr;   // the host's compute buffer type
  void merge(const ComputeNeeds& o);  // the larger of each
};

// Compute memory owned outside any one ScheduledGraph: one buffer per device
// and one for the inputs, shared by every graph scheduled into the arena. The
// graphs must run one at a time (a context runs one graph at a time). A graph
// whose plan needs more than is reserved grows the buffer: the old one is
// freed, so every graph scheduled into the arena before is stale (run() on it
// throws); generation() changes whenever that happens.
class ComputeArena {
 public:
  ComputeArena() = default;
  ComputeArena(const ComputeArena&) = delete;
  ComputeArena& operator=(const ComputeArena&) = delete;

  // Allocates (or grows) the buffers to hold at least `needs`. Returns true if
  // anything was allocated; last_growth() then says what.
  bool reserve(const ComputeNeeds& needs);
  bool empty() const { return compute_.empty() && !inputs_.buffer; }
  // Bytes reserved per device name ("inputs" for the inputs' host buffer).
  std::map<std::string, uint64_t> reserved() const;
  uint64_t generation() const { return generation_; }
  const std::string& last_growth() const { return last_growth_; }

 private:
  friend class Scheduler;
  struct Entry {
    std::unique_ptr<Buffer> buffer;
    uint64_t size = 0;
  };
  std::map<Device*, Entry> compute_;
  Entry inputs_;
  BufferType* input_type_ = nullptr;
  uint64_t generation_ = 0;
  std::string last_growth_;
};

class ScheduledGraph {
 public:
  // Runs every segment in order (copies first). Allocation-free. Throws
  // opal::Error if the arena it was scheduled into has grown since.
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
  // Counts the compute and input buffers the scheduler (or an arena) ever
  // allocated in this process, and their bytes; tests use them to prove that
  // compute memory is reserved once, not per batch shape.
  static uint64_t compute_buffers_allocated();
  static uint64_t compute_bytes_allocated();

 private:
  friend class Scheduler;
  std::unique_ptr<Graph> graph_;
  std::deque<Tensor> extra_;  // copy destinations and re-pointed views
  std::map<const Tensor*, Placement> placement_;
  std::vector<Segment> segments_;
  std::vector<std::vector<CrossCopy>> copies_;
  std::vector<std::unique_ptr<Plan>> plans_;
  std::vector<std::unique_ptr<HostFallback>> fallbacks_;  // one per accelerator segment the host can read
  std::vector<std::unique_ptr<Buffer>> buffers_;          // empty when scheduled into an arena
  const ComputeArena* arena_ = nullptr;
  uint64_t arena_generation_ = 0;
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
  // With an arena, the graph's tensors live in the arena's buffers (grown
  // first if the plan does not fit); without, the graph allocates its own.
  std::unique_ptr<ScheduledGraph> schedule(std::unique_ptr<Graph> graph, ComputeArena* arena = nullptr) const;

  // Places, splits and plans memory like schedule(), but allocates and
  // compiles nothing: the bytes the graph needs, to reserve an arena with.
  ComputeNeeds measure(std::unique_ptr<Graph> graph) const;

  Registry& registry() const { return registry_; }

 private:
  struct MemoryPlan;
  std::unique_ptr<ScheduledGraph> place_and_plan(std::unique_ptr<Graph> graph, MemoryPlan& plan) const;
  Placement place_node(const Tensor& node, const std::map<const Tensor*, Placement>& placed) const;
  Registry& registry_;
};

// The device holding a leaf's bytes, found through the registry (null for a
// leaf without a buffer).
Device* device_of(const Registry& reg, const Tensor& t);

}  // namespace opal
