// The sinks of the perf event stream (perf_events.h); docs/perf-events.md
// documents the formats.
//   PerfLogSink  one key=value line per event:
//                OPAL_PERF|op=..|kernel=..|backend=..|tensor=..|shape=[..]|dtype=..|
//                duration_us=..|start_us=..|end_us=..|flops=..|bytes=..[|op-specific keys]
//                [|phase_<name>_us=..|phase_<name>_start_us=.. per phase]
//   TraceSink    Chrome trace-event JSON (Perfetto, chrome://tracing): one
//                track per backend and thread, one track per copy direction;
//                a node's phases are slices nested inside its slice.
//   SummarySink  time, FLOP/s and GB/s per op type and per backend, the
//                copies between backends and the time of each node phase
//                per backend; printed at finish().
#pragma once
#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graph/perf/perf_events.h"

namespace opal {

// The perf-log line of one event (no trailing newline).
std::string perf_log_line(const PerfEvent& e);

class PerfLogSink : public PerfSink {
 public:
  // Writes to path ("-" = stderr); throws opal::Error if it cannot be opened.
  explicit PerfLogSink(const std::string& path);
  ~PerfLogSink() override;
  void on_event(const PerfEvent& e) override;
  void finish() override;

 private:
  std::FILE* f_ = nullptr;
  bool own_ = false;
  std::string path_;
};

class TraceSink : public PerfSink {
 public:
  explicit TraceSink(std::string path);  // the file is written at finish()
  void on_event(const PerfEvent& e) override;
  void finish() override;

 private:
  struct Record {
    std::string name, kernel;  // short names fit the string's inline buffer; a phase: its name, its node
    const char* op = "";       // op_name(): static
    bool phase = false;        // a phase inside the node before it (PerfEvent::phases)
    std::array<int64_t, kMaxDims> ne{};
    DType dtype = DType::F32;
    int track = 0;
    int64_t start_ns = 0, end_ns = 0;
    double flops = 0;
    uint64_t bytes = 0;
    std::vector<std::pair<const char*, double>> counters;  // RunHooks::node_counter (names are literals)
  };
  int track_of(const std::string& label);
  std::string path_;
  std::vector<Record> records_;
  std::map<std::string, int> tracks_;                              // label -> tid
  std::map<std::pair<const std::string*, int>, int> node_tracks_;  // (backend, thread) -> tid
};

struct PerfTotals {
  uint64_t count = 0;
  int64_t ns = 0;
  double flops = 0;
  uint64_t bytes = 0;
  void add(const PerfEvent& e) {
    ++count;
    ns += e.end_ns - e.start_ns;
    flops += e.flops;
    bytes += e.bytes;
  }
};

class SummarySink : public PerfSink {
 public:
  explicit SummarySink(std::FILE* out = stderr) : out_(out) {}
  void on_event(const PerfEvent& e) override;
  void finish() override;
  // What the summary printed, for tests.
  using Table = std::map<std::string, PerfTotals, std::less<>>;
  const Table& by_op() const { return by_op_; }            // "MUL_MAT"
  const Table& by_backend() const { return by_backend_; }  // "cpu"
  const Table& copies() const { return copies_; }          // "cpu -> test_accel"
  const Table& phases() const { return phases_; }          // "rocket wait" (count and ns only)
  const PerfTotals& nodes() const { return nodes_; }
  std::string text() const;

 private:
  PerfTotals& slot(std::map<std::string, PerfTotals, std::less<>>& m, std::string_view key);
  std::FILE* out_;
  std::map<std::string, PerfTotals, std::less<>> by_op_, by_backend_, copies_, phases_;
  std::vector<std::string> phase_order_;  // phases_' keys in the order first seen (the order run)
  PerfTotals nodes_;
};

}  // namespace opal
