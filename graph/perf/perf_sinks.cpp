// The perf-log, trace and summary sinks (perf_sinks.h).
#include "graph/perf/perf_sinks.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "graph/op_info.h"

namespace opal {
namespace {

// Names never contain the separators of the line format.
std::string clean(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c == '|' || c == '=' || c == ' ' || c == '\n' || c == '\t') c = '_';
  return o;
}

std::string compact_shape(const std::array<int64_t, kMaxDims>& ne) {
  int n = kMaxDims;
  while (n > 1 && ne[n - 1] == 1) --n;
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? "," : "", ne[i]);
  return s + "]";
}

std::string op_keys(const PerfEvent& e) {
  const Tensor& t = *e.tensor;
  if (e.kind == PerfEventKind::Copy) return fmt::format("|from={}|to={}", *e.from, *e.backend);
  return op_info(t.op).perf_fields(t);  // the op's own fields: a column of its row (graph/op_info.h)
}

double us(int64_t ns) { return double(ns) / 1000.0; }

}  // namespace

std::string perf_log_line(const PerfEvent& e) {
  const Tensor& t = *e.tensor;
  std::string line = fmt::format(
      "OPAL_PERF|op={}|kernel={}|backend={}|tensor={}|shape={}|dtype={}|duration_us={:.3f}|start_us={:.3f}|end_us={:."
      "3f}"
      "|flops={:.0f}|bytes={}{}",
      e.op, clean(e.kernel), clean(*e.backend), clean(t.name), compact_shape(t.ne), dtype_name(t.type),
      us(e.end_ns - e.start_ns), us(e.start_ns), us(e.end_ns), e.flops, e.bytes, op_keys(e));
  // Phases, in the order run: phase_<name>_us = duration, phase_<name>_start_us = start.
  for (size_t i = 0; i < e.n_phases; ++i) {
    const PerfPhase& p = e.phases[i];
    const std::string name = clean(p.name);
    line += fmt::format("|phase_{}_us={:.3f}|phase_{}_start_us={:.3f}", name, us(p.end_ns - p.start_ns), name,
                        us(p.start_ns));
  }
  // Counters, in the order reported: <name>=<value>.
  for (size_t i = 0; i < e.n_counters; ++i)
    line += fmt::format("|{}={}", clean(e.counters[i].name), e.counters[i].value);
  return line;
}

PerfLogSink::PerfLogSink(const std::string& path) : path_(path) {
  if (path == "-") {
    f_ = stderr;
  } else {
    f_ = std::fopen(path.c_str(), "w");
    if (!f_) fail("--perf-log: cannot write '{}'", path);
    own_ = true;
  }
}

PerfLogSink::~PerfLogSink() {
  if (own_ && f_) std::fclose(f_);
}

void PerfLogSink::on_event(const PerfEvent& e) {
  const std::string line = perf_log_line(e);
  std::fputs(line.c_str(), f_);
  std::fputc('\n', f_);
}

void PerfLogSink::finish() {
  if (std::fflush(f_) != 0) fail("--perf-log: error writing '{}'", path_);
}

TraceSink::TraceSink(std::string path) : path_(std::move(path)) {
  std::ofstream probe(path_);  // fail early, not after a long run
  if (!probe) fail("--trace: cannot write '{}'", path_);
  records_.reserve(4096);
}

int TraceSink::track_of(const std::string& label) {
  auto it = tracks_.find(label);
  if (it == tracks_.end()) it = tracks_.emplace(label, int(tracks_.size()) + 1).first;
  return it->second;
}

void TraceSink::on_event(const PerfEvent& e) {
  Record r;
  const Tensor& t = *e.tensor;
  r.name = t.name;
  r.op = e.op;
  r.kernel = e.kernel;
  r.ne = t.ne;
  r.dtype = t.type;
  if (e.kind == PerfEventKind::Copy) {
    r.track = track_of(fmt::format("copy {} -> {}", *e.from, *e.backend));
  } else {
    auto it = node_tracks_.find({e.backend, e.thread});
    if (it == node_tracks_.end())
      it = node_tracks_
               .emplace(std::make_pair(e.backend, e.thread),
                        track_of(fmt::format("{} (thread {})", *e.backend, e.thread)))
               .first;
    r.track = it->second;
  }
  r.start_ns = e.start_ns;
  r.end_ns = e.end_ns;
  r.flops = e.flops;
  r.bytes = e.bytes;
  for (size_t i = 0; i < e.n_counters; ++i) r.counters.emplace_back(e.counters[i].name, e.counters[i].value);
  const int track = r.track;
  records_.push_back(std::move(r));
  // Phases: slices on the node's track inside its span, so viewers nest them under it.
  for (size_t i = 0; i < e.n_phases; ++i) {
    Record p;
    p.phase = true;
    p.name = e.phases[i].name;
    p.kernel = t.name;  // the node the phase belongs to
    p.op = e.op;
    p.track = track;
    p.start_ns = e.phases[i].start_ns;
    p.end_ns = e.phases[i].end_ns;
    records_.push_back(std::move(p));
  }
}

void TraceSink::finish() {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "opal"}}}});
  for (const auto& [label, tid] : tracks_) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", label}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  for (const Record& r : records_) {
    if (r.phase) {
      events.push_back({{"name", r.name},
                        {"cat", "phase"},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", r.track},
                        {"ts", us(r.start_ns)},
                        {"dur", us(r.end_ns - r.start_ns)},
                        {"args", {{"node", r.kernel}, {"op", r.op}}}});
      continue;
    }
    json args = {
        {"op", r.op},       {"kernel", r.kernel}, {"shape", compact_shape(r.ne)}, {"dtype", dtype_name(r.dtype)},
        {"flops", r.flops}, {"bytes", r.bytes}};
    for (const auto& [name, value] : r.counters) args[name] = value;
    events.push_back({{"name", r.name},
                      {"cat", r.op},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", r.track},
                      {"ts", us(r.start_ns)},
                      {"dur", us(r.end_ns - r.start_ns)},
                      {"args", std::move(args)}});
  }
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
  std::ofstream f(path_);
  if (!f) fail("--trace: cannot write '{}'", path_);
  f << doc.dump() << "\n";
  if (!f) fail("--trace: error writing '{}'", path_);
}

PerfTotals& SummarySink::slot(Table& m, std::string_view key) {
  auto it = m.find(key);
  if (it == m.end()) it = m.emplace(std::string(key), PerfTotals{}).first;
  return it->second;
}

void SummarySink::on_event(const PerfEvent& e) {
  if (e.kind == PerfEventKind::Copy) {
    slot(copies_, fmt::format("{} -> {}", *e.from, *e.backend)).add(e);
    return;
  }
  nodes_.add(e);
  slot(by_op_, e.op).add(e);
  slot(by_backend_, *e.backend).add(e);
  for (size_t i = 0; i < e.n_phases; ++i) {
    const std::string key = fmt::format("{} {}", *e.backend, e.phases[i].name);
    if (!phases_.count(key)) phase_order_.push_back(key);
    PerfTotals& t = slot(phases_, key);
    ++t.count;
    t.ns += e.phases[i].end_ns - e.phases[i].start_ns;
  }
}

std::string SummarySink::text() const {
  auto row = [&](const std::string& name, const PerfTotals& t, int64_t total_ns) {
    const double s = double(t.ns) * 1e-9;
    return fmt::format("  {:<22} {:>8} {:>10.3f} {:>6.1f}% {:>10.2f} {:>9.2f}\n", name, t.count, double(t.ns) * 1e-6,
                       total_ns ? 100.0 * double(t.ns) / double(total_ns) : 0.0, s > 0 ? t.flops / s * 1e-9 : 0.0,
                       s > 0 ? double(t.bytes) / s * 1e-9 : 0.0);
  };
  const std::string head =
      fmt::format("  {:<22} {:>8} {:>10} {:>7} {:>10} {:>9}\n", "", "count", "ms", "time", "GFLOP/s", "GB/s");
  std::string s = "perf summary: per op type\n" + head;
  std::vector<std::pair<std::string, PerfTotals>> ops(by_op_.begin(), by_op_.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  for (const auto& [name, t] : ops) s += row(name, t, nodes_.ns);
  s += row("total", nodes_, nodes_.ns);
  s += "perf summary: per backend\n" + head;
  for (const auto& [name, t] : by_backend_) s += row(name, t, nodes_.ns);
  if (!copies_.empty()) {
    s += "perf summary: copies between backends\n" + head;
    for (const auto& [name, t] : copies_) s += row(name, t, nodes_.ns);
  }
  if (!phases_.empty()) {  // time inside the nodes, % of all node time
    s += "perf summary: phases inside nodes\n" + head;
    for (const std::string& name : phase_order_) s += row(name, phases_.at(name), nodes_.ns);
  }
  return s;
}

void SummarySink::finish() {
  if (out_) std::fputs(text().c_str(), out_);
}

}  // namespace opal
