// One observability stream for every backend (docs/perf-events.md).
// Executors call RunHooks::before_node/after_node around each node
// (or fused group) and the scheduler calls before_copy/after_copy around each
// copy between devices; PerfRecorder turns those calls into PerfEvents
//   {backend, op, kernel, tensor, shape, dtype, start, end, flops, bytes}
// and hands each to its sinks (perf_sinks.h: perf-log lines, Chrome trace,
// summary). Phases an executor reports inside a node (RunHooks::node_phase:
// an accelerator's pack, submit, wait, unpack) travel with the node's event. Nothing here runs unless a recorder is
// installed with Context::set_hooks: with no hooks the executors skip the calls entirely.
//
// HookChain runs several RunHooks (e.g. the recorder and the shadow compare)
// as one: before_* in reverse order and after_* in order, so the first hook
// (the recorder) brackets the node most tightly and its timings exclude the
// work of the others.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graph/backend.h"

namespace opal {

enum class PerfEventKind : uint8_t { Node, Copy };

// One timed phase inside a node's span (RunHooks::node_phase).
struct PerfPhase {
  const char* name = "";  // a string literal of the executor
  int64_t start_ns = 0;   // since the recorder was made
  int64_t end_ns = 0;
};

// One named number an executor reported for a node (RunHooks::node_counter).
struct PerfCounter {
  const char* name = "";  // a string literal of the executor
  double value = 0;
};

struct PerfEvent {
  PerfEventKind kind = PerfEventKind::Node;
  const std::string* backend = nullptr;  // device name (for a copy: the destination)
  const std::string* from = nullptr;     // for a copy: the source device's name
  const char* op = "";                   // "MUL_MAT", ..., "COPY"
  const char* kernel = "";
  const Tensor* tensor = nullptr;  // the node (for a copy: the destination tensor)
  int thread = 0;                  // small index of the OS thread that ran it
  int64_t start_ns = 0;            // since the recorder was made
  int64_t end_ns = 0;
  double flops = 0;
  uint64_t bytes = 0;
  // The node's phases in the order reported (none for most kernels and for
  // copies); valid during on_event only.
  const PerfPhase* phases = nullptr;
  size_t n_phases = 0;
  // The node's counters in the order reported (none for most kernels); valid during on_event only.
  const PerfCounter* counters = nullptr;
  size_t n_counters = 0;
};

class PerfSink {
 public:
  virtual ~PerfSink() = default;
  virtual void on_event(const PerfEvent& e) = 0;
  // Called once at the end (writes files, prints reports).
  virtual void finish() {}
};

class PerfRecorder : public RunHooks {
 public:
  PerfRecorder();
  void add_sink(std::unique_ptr<PerfSink> sink);
  void before_node(const Device& dev, const Tensor& node) override;
  void after_node(const Device& dev, const Tensor& node, const char* kernel) override;
  void node_phase(const Device& dev, const Tensor& node, const char* phase, int64_t start_ns, int64_t end_ns) override;
  void node_counter(const Device& dev, const Tensor& node, const char* name, double value) override;
  void before_copy(const CrossCopy& copy, const Device& to) override;
  void after_copy(const CrossCopy& copy, const Device& to) override;
  void finish();
  uint64_t n_events() const { return n_events_; }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t now_ns() const;
  const std::string* name_of(const Device* dev);
  int thread_index();
  void emit(const PerfEvent& e);

  Clock::time_point t0_;
  int64_t t0_epoch_ns_ = 0;  // t0_ on the phase clock (phase_clock_ns)
  int64_t start_ns_ = 0;
  std::vector<PerfPhase> phases_;      // of the node being run
  std::vector<PerfCounter> counters_;  // of the node being run
  std::map<const Device*, std::string> names_;
  std::map<std::thread::id, int> threads_;
  std::vector<std::unique_ptr<PerfSink>> sinks_;
  uint64_t n_events_ = 0;
  bool finished_ = false;
};

class HookChain : public RunHooks {
 public:
  void add(RunHooks* h) {
    if (h) hooks_.push_back(h);
  }
  bool empty() const { return hooks_.empty(); }
  size_t size() const { return hooks_.size(); }
  RunHooks* only() const { return hooks_.size() == 1 ? hooks_[0] : nullptr; }
  void before_node(const Device& dev, const Tensor& node) override;
  void after_node(const Device& dev, const Tensor& node, const char* kernel) override;
  void node_phase(const Device& dev, const Tensor& node, const char* phase, int64_t start_ns, int64_t end_ns) override;
  void node_counter(const Device& dev, const Tensor& node, const char* name, double value) override;
  bool reads_node_memory() const override;
  void before_copy(const CrossCopy& copy, const Device& to) override;
  void after_copy(const CrossCopy& copy, const Device& to) override;

 private:
  std::vector<RunHooks*> hooks_;
};

}  // namespace opal
