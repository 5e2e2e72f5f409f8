// The perf event stream and its sinks, on a golden tiny model split between
// the CPU and the test accelerator: one perf-log line per executed node and
// copy, a valid Chrome trace with a track per backend and for the copies,
// and summary totals that agree with the events; an accelerator's phases
// inside its nodes (rocket on the NPU emulator).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/factory/backend_factory.h"
#include "graph/perf/perf_events.h"
#include "graph/perf/perf_sinks.h"
#include "graph/scheduler.h"
#include "models/model.h"
#include "runtime/context.h"
#include "support/test_support.h"

namespace opal {
namespace {

// Counts what the executors and the scheduler report, independently of the recorder.
struct Counter : RunHooks {
  uint64_t nodes = 0, copies = 0, copy_bytes = 0;
  std::map<std::string, uint64_t> per_device;
  void after_node(const Device& d, const Tensor&, const char*) override {
    ++nodes;
    ++per_device[d.name()];
  }
  void after_copy(const CrossCopy& c, const Device&) override {
    ++copies;
    copy_bytes += c.src->nbytes();
  }
};

std::map<std::string, std::string> parse_line(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::stringstream ss(line);
  std::string field;
  std::getline(ss, field, '|');
  EXPECT_EQ(field, "OPAL_PERF");
  while (std::getline(ss, field, '|')) {
    const size_t eq = field.find('=');
    EXPECT_NE(eq, std::string::npos) << field;
    if (eq != std::string::npos) kv[field.substr(0, eq)] = field.substr(eq + 1);
  }
  return kv;
}

void run_tokens(Context& ctx) {
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(10 + i, i, 0, i == 5);
  ctx.decode(b);
  for (int i = 6; i < 9; ++i) {
    b.clear();
    b.add(20 + i, i, 0, true);
    ctx.decode(b);
  }
}

TEST(PerfEvents, LogTraceAndSummaryAgreeWithTheExecutedNodes) {
  auto reg = make_registry({"test-accel"}, 1);
  auto model = Model::load(test::golden_model("tiny-llama-q8_0"), *reg);
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  const std::string dir = test::temp_dir();
  PerfRecorder rec;
  rec.add_sink(std::make_unique<PerfLogSink>(dir + "/perf.log"));
  rec.add_sink(std::make_unique<TraceSink>(dir + "/trace.json"));
  auto summary_owned = std::make_unique<SummarySink>(nullptr);
  SummarySink* summary = summary_owned.get();
  rec.add_sink(std::move(summary_owned));
  Counter counter;
  HookChain chain;
  chain.add(&rec);
  chain.add(&counter);
  ctx.set_hooks(&chain);
  run_tokens(ctx);
  rec.finish();
  ctx.set_hooks(nullptr);

  ASSERT_GT(counter.nodes, 0u);
  ASSERT_GT(counter.copies, 0u);
  EXPECT_EQ(rec.n_events(), counter.nodes + counter.copies);

  // perf log: one line per node and copy, every key present and well-formed
  std::ifstream f(dir + "/perf.log");
  std::string line;
  uint64_t node_lines = 0, copy_lines = 0, copy_bytes = 0, matmul_lines = 0;
  std::map<std::string, uint64_t> per_backend;
  while (std::getline(f, line)) {
    auto kv = parse_line(line);
    for (const char* key :
         {"op", "kernel", "backend", "tensor", "shape", "dtype", "duration_us", "start_us", "end_us", "flops", "bytes"})
      ASSERT_TRUE(kv.count(key)) << key << " missing in " << line;
    const double start = std::stod(kv["start_us"]), end = std::stod(kv["end_us"]), dur = std::stod(kv["duration_us"]);
    EXPECT_LE(start, end);
    EXPECT_NEAR(end - start, dur, 2e-3);
    EXPECT_EQ(kv["shape"].front(), '[');
    if (kv["op"] == "COPY") {
      ++copy_lines;
      copy_bytes += std::stoull(kv["bytes"]);
      EXPECT_TRUE(kv.count("from") && kv.count("to")) << line;
      EXPECT_NE(kv["from"], kv["to"]);
    } else {
      ++node_lines;
      ++per_backend[kv["backend"]];
    }
    if (kv["op"] == "MUL_MAT") {
      ++matmul_lines;
      EXPECT_EQ(kv["backend"], "test_accel") << line;
      const double want = 2.0 * std::stod(kv["k"]) * std::stod(kv["n"]) * std::stod(kv["m"]);
      EXPECT_DOUBLE_EQ(std::stod(kv["flops"]), want) << line;
    }
  }
  EXPECT_EQ(node_lines, counter.nodes);
  EXPECT_EQ(copy_lines, counter.copies);
  EXPECT_EQ(copy_bytes, counter.copy_bytes);
  EXPECT_EQ(per_backend, counter.per_device);
  EXPECT_EQ(matmul_lines, 15u * 4);  // 15 matmuls per graph run, 4 runs

  // trace: valid JSON, named tracks for each backend and the copies, one X event per line
  std::ifstream tf(dir + "/trace.json");
  const nlohmann::json trace = nlohmann::json::parse(tf);
  std::set<std::string> tracks;
  uint64_t x_events = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") {
      ++x_events;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(x_events, counter.nodes + counter.copies);
  EXPECT_TRUE(tracks.count("cpu (thread 0)"));
  EXPECT_TRUE(tracks.count("test_accel (thread 0)"));
  EXPECT_TRUE(tracks.count("copy cpu -> test_accel"));
  EXPECT_TRUE(tracks.count("copy test_accel -> cpu"));

  // summary: per op and per backend totals agree with each other and the log
  uint64_t n_op = 0, n_be = 0, n_cp = 0;
  int64_t ns_op = 0, ns_be = 0;
  for (const auto& [k, t] : summary->by_op()) n_op += t.count, ns_op += t.ns;
  for (const auto& [k, t] : summary->by_backend()) n_be += t.count, ns_be += t.ns;
  for (const auto& [k, t] : summary->copies()) n_cp += t.count;
  EXPECT_EQ(n_op, counter.nodes);
  EXPECT_EQ(n_be, counter.nodes);
  EXPECT_EQ(n_cp, counter.copies);
  EXPECT_EQ(ns_op, summary->nodes().ns);
  EXPECT_EQ(ns_be, summary->nodes().ns);
  EXPECT_EQ(summary->by_op().at("MUL_MAT").count, 60u);
  EXPECT_NE(summary->text().find("GFLOP/s"), std::string::npos);
  EXPECT_TRUE(summary->phases().empty()) << "the test accelerator and the CPU report no phases";
}

// Keeps the phases the recorder attaches to each node event.
struct PhaseSink : PerfSink {
  struct Node {
    std::string backend, kernel, tensor;
    int64_t start_ns = 0, end_ns = 0;
    std::vector<PerfPhase> phases;
  };
  std::vector<Node> nodes;
  void on_event(const PerfEvent& e) override {
    if (e.kind != PerfEventKind::Node) {
      EXPECT_EQ(e.n_phases, 0u);
      return;
    }
    nodes.push_back({*e.backend, e.kernel, e.tensor->name, e.start_ns, e.end_ns,
                     std::vector<PerfPhase>(e.phases, e.phases + e.n_phases)});
  }
};

// An accelerator's phases (rocket on the NPU emulator: host prepare, submit,
// device wait, unpack) reach the events, the perf-log line and the trace (as
// slices nested in the node's), in order and inside the node's span; the
// other kernels report none.
TEST(PerfEvents, RocketNodesReportTheirPhasesInOrderInsideTheNode) {
  auto reg = make_registry({"rocket"}, 1);
  auto model = Model::load(test::shared_path("golden/models/tiny-llama-q8_0.gguf"), *reg);
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(*model, cp);
  const std::string dir = test::temp_dir();
  PerfRecorder rec;
  rec.add_sink(std::make_unique<PerfLogSink>(dir + "/perf.log"));
  rec.add_sink(std::make_unique<TraceSink>(dir + "/trace.json"));
  auto sink_owned = std::make_unique<PhaseSink>();
  PhaseSink* sink = sink_owned.get();
  rec.add_sink(std::move(sink_owned));
  auto summary_owned = std::make_unique<SummarySink>(nullptr);
  SummarySink* summary = summary_owned.get();
  rec.add_sink(std::move(summary_owned));
  ctx.set_hooks(&rec);
  Batch b;
  for (int i = 0; i < 40; ++i) b.add(10 + i, i, 0, i == 39);  // M = 40 >= rocket's min batch
  ctx.decode(b);
  rec.finish();
  ctx.set_hooks(nullptr);

  const std::vector<std::string> want = {"prepare", "submit", "wait", "unpack"};
  uint64_t npu_nodes = 0;
  for (const auto& n : sink->nodes) {
    if (n.backend == "rocket") {
      EXPECT_EQ(n.kernel, "rocket-npu") << n.tensor << ": no fallback on the emulator";
    }
    if (n.kernel != "rocket-npu") {
      EXPECT_TRUE(n.phases.empty()) << n.tensor << " on " << n.backend;
      continue;
    }
    ++npu_nodes;
    ASSERT_EQ(n.phases.size(), want.size()) << n.tensor;
    int64_t at = n.start_ns;
    for (size_t i = 0; i < want.size(); ++i) {
      const PerfPhase& p = n.phases[i];
      EXPECT_EQ(p.name, want[i]) << n.tensor;
      EXPECT_GE(p.start_ns, at) << n.tensor << " " << p.name;
      EXPECT_LE(p.start_ns, p.end_ns) << n.tensor << " " << p.name;
      at = p.end_ns;
    }
    EXPECT_LE(at, n.end_ns) << n.tensor;
  }
  EXPECT_GE(npu_nodes, 14u) << "the 40-token batch's matmuls (but the one-row output) run on the NPU";

  // summary: per backend and phase, one count per NPU node, in the order run
  const std::string text = summary->text();
  size_t at_text = text.find("perf summary: phases inside nodes");
  ASSERT_NE(at_text, std::string::npos) << text;
  for (const std::string& p : want) {
    ASSERT_TRUE(summary->phases().count("rocket " + p)) << p << "\n" << text;
    EXPECT_EQ(summary->phases().at("rocket " + p).count, npu_nodes) << p;
    const size_t row = text.find("rocket " + p, at_text);
    EXPECT_NE(row, std::string::npos) << p << "\n" << text;
    at_text = row;
  }
  EXPECT_EQ(summary->phases().size(), want.size());

  // perf log: phase_<name>_us and phase_<name>_start_us on the rocket lines, in order, inside the node
  std::ifstream f(dir + "/perf.log");
  std::string line;
  uint64_t phase_lines = 0;
  while (std::getline(f, line)) {
    auto kv = parse_line(line);
    if (kv["kernel"] != "rocket-npu") {
      EXPECT_EQ(line.find("|phase_"), std::string::npos) << line;
      continue;
    }
    ++phase_lines;
    double at = std::stod(kv["start_us"]);
    for (const std::string& p : want) {
      ASSERT_TRUE(kv.count("phase_" + p + "_us") && kv.count("phase_" + p + "_start_us")) << p << " in " << line;
      const double start = std::stod(kv["phase_" + p + "_start_us"]), dur = std::stod(kv["phase_" + p + "_us"]);
      EXPECT_GE(start, at - 2e-3) << p << " in " << line;
      EXPECT_GE(dur, 0.0) << line;
      at = start + dur;
    }
    EXPECT_LE(at, std::stod(kv["end_us"]) + 2e-3) << line;
    EXPECT_LT(line.find("|phase_prepare_us="), line.find("|phase_unpack_us=")) << "phases in the order run";
  }
  EXPECT_EQ(phase_lines, npu_nodes);

  // trace: each phase a slice on its node's track, inside the node's slice
  std::ifstream tf(dir + "/trace.json");
  const nlohmann::json trace = nlohmann::json::parse(tf);
  std::map<std::string, std::vector<const nlohmann::json*>> nodes_by_name;
  std::vector<const nlohmann::json*> phases;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "phase") phases.push_back(&e);
    else nodes_by_name[e["name"].get<std::string>()].push_back(&e);
  }
  EXPECT_EQ(phases.size(), npu_nodes * want.size());
  for (const nlohmann::json* p : phases) {
    const double ts = (*p)["ts"].get<double>(), end = ts + (*p)["dur"].get<double>();
    bool inside = false;
    for (const nlohmann::json* n : nodes_by_name[(*p)["args"]["node"].get<std::string>()]) {
      const double nts = (*n)["ts"].get<double>(), nend = nts + (*n)["dur"].get<double>();
      inside |= (*n)["tid"] == (*p)["tid"] && ts >= nts - 2e-3 && end <= nend + 2e-3;
    }
    EXPECT_TRUE(inside) << p->dump();
  }
}

TEST(PerfEvents, NoHooksMeansNoEvents) {
  auto reg = make_registry({}, 1);
  auto model = Model::load(test::golden_model("tiny-llama-q8_0"), *reg);
  ContextParams cp;
  cp.n_ctx = 32;
  Context ctx(*model, cp);
  PerfRecorder rec;  // made but not installed
  run_tokens(ctx);
  EXPECT_EQ(rec.n_events(), 0u);
}

TEST(PerfEvents, CliSinksOnRunLogitsPerplexity) {
  const std::string dir = test::temp_dir();
  const std::string model = test::golden_model("tiny-llama-q8_0");
  std::string out;
  ASSERT_EQ(test::run_command(test::opal_binary() + " run -m " + model +
                                  " -p hello -n 3 --temp 0 -c 32 -t 1 --backend test-accel --perf-log " + dir +
                                  "/run.log --trace " + dir + "/run.json --summary 2>&1",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("perf summary: per op type"), std::string::npos) << out;
  EXPECT_NE(out.find("copies between backends"), std::string::npos) << out;
  std::ifstream log(dir + "/run.log");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) {
    EXPECT_EQ(line.rfind("OPAL_PERF|op=", 0), 0u) << line;
    ++lines;
  }
  EXPECT_GT(lines, 40);
  std::ifstream tr(dir + "/run.json");
  EXPECT_TRUE(nlohmann::json::accept(tr)) << dir << "/run.json is not JSON";

  ASSERT_EQ(test::run_command(test::opal_binary() + " logits -m " + model + " --tokens 1,2,3 --greedy 2 --out " + dir +
                                  "/lg --perf-log " + dir + "/lg.log 2>&1",
                              &out),
            0)
      << out;
  std::ifstream lg(dir + "/lg.log");
  EXPECT_TRUE(std::getline(lg, line));
  EXPECT_EQ(line.rfind("OPAL_PERF|", 0), 0u);

  ASSERT_EQ(test::run_command(test::opal_binary() + " perplexity -m " + test::shared_path("models/stories260K.gguf") +
                                  " -f " + test::shared_path("golden/story.txt") + " -c 128 -t 1 --summary 2>&1",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("perf summary: per backend"), std::string::npos) << out;
  // a path that cannot be written is an error before anything runs
  EXPECT_NE(test::run_command(
                test::opal_binary() + " run -m " + model + " -p hi -n 1 --perf-log /nonexistent/x.log 2>&1", &out),
            0);
  EXPECT_NE(out.find("--perf-log"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
