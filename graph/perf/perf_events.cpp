// PerfRecorder and HookChain (perf_events.h).
#include "graph/perf/perf_events.h"

#include "graph/perf/node_cost.h"
#include "graph/scheduler.h"

namespace opal {

PerfRecorder::PerfRecorder()
    : t0_(Clock::now()),
      t0_epoch_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(t0_.time_since_epoch()).count()) {
  phases_.reserve(16);
}

int64_t PerfRecorder::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
}

const std::string* PerfRecorder::name_of(const Device* dev) {
  static const std::string unknown = "unknown";
  if (!dev) return &unknown;
  auto it = names_.find(dev);
  if (it == names_.end()) it = names_.emplace(dev, dev->name()).first;
  return &it->second;
}

int PerfRecorder::thread_index() {
  const auto id = std::this_thread::get_id();
  auto it = threads_.find(id);
  if (it == threads_.end()) it = threads_.emplace(id, int(threads_.size())).first;
  return it->second;
}

void PerfRecorder::add_sink(std::unique_ptr<PerfSink> sink) { sinks_.push_back(std::move(sink)); }

void PerfRecorder::emit(const PerfEvent& e) {
  ++n_events_;
  for (auto& s : sinks_) s->on_event(e);
}

void PerfRecorder::before_node(const Device&, const Tensor&) {
  phases_.clear();
  counters_.clear();
  start_ns_ = now_ns();
}

void PerfRecorder::node_phase(const Device&, const Tensor&, const char* phase, int64_t start_ns, int64_t end_ns) {
  phases_.push_back({phase ? phase : "", start_ns - t0_epoch_ns_, end_ns - t0_epoch_ns_});
}

void PerfRecorder::node_counter(const Device&, const Tensor&, const char* name, double value) {
  counters_.push_back({name ? name : "", value});
}

void PerfRecorder::after_node(const Device& dev, const Tensor& node, const char* kernel) {
  const int64_t end = now_ns();
  const NodeCost cost = node_cost(node);
  PerfEvent e;
  e.kind = PerfEventKind::Node;
  e.backend = name_of(&dev);
  e.op = op_name(node.op);
  e.kernel = kernel ? kernel : "";
  e.tensor = &node;
  e.thread = thread_index();
  e.start_ns = start_ns_;
  e.end_ns = end;
  e.flops = cost.flops;
  e.bytes = cost.bytes;
  e.phases = phases_.data();
  e.n_phases = phases_.size();
  e.counters = counters_.data();
  e.n_counters = counters_.size();
  emit(e);
  phases_.clear();
  counters_.clear();
}

void PerfRecorder::before_copy(const CrossCopy&, const Device&) { start_ns_ = now_ns(); }

void PerfRecorder::after_copy(const CrossCopy& copy, const Device& to) {
  const int64_t end = now_ns();
  PerfEvent e;
  e.kind = PerfEventKind::Copy;
  e.backend = name_of(&to);
  e.from = name_of(copy.from);
  e.op = "COPY";
  e.kernel = "copy";
  e.tensor = copy.dst;
  e.thread = thread_index();
  e.start_ns = start_ns_;
  e.end_ns = end;
  e.bytes = copy.src->nbytes();
  emit(e);
}

void PerfRecorder::finish() {
  if (finished_) return;
  finished_ = true;
  for (auto& s : sinks_) s->finish();
}

void HookChain::before_node(const Device& dev, const Tensor& node) {
  for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) (*it)->before_node(dev, node);
}
bool HookChain::reads_node_memory() const {
  for (RunHooks* h : hooks_)
    if (h->reads_node_memory()) return true;
  return false;
}
void HookChain::after_node(const Device& dev, const Tensor& node, const char* kernel) {
  for (RunHooks* h : hooks_) h->after_node(dev, node, kernel);
}
void HookChain::node_phase(const Device& dev, const Tensor& node, const char* phase, int64_t start_ns, int64_t end_ns) {
  for (RunHooks* h : hooks_) h->node_phase(dev, node, phase, start_ns, end_ns);
}

void HookChain::node_counter(const Device& dev, const Tensor& node, const char* name, double value) {
  for (RunHooks* h : hooks_) h->node_counter(dev, node, name, value);
}
void HookChain::before_copy(const CrossCopy& copy, const Device& to) {
  for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) (*it)->before_copy(copy, to);
}
void HookChain::after_copy(const CrossCopy& copy, const Device& to) {
  for (RunHooks* h : hooks_) h->after_copy(copy, to);
}

}  // namespace opal
