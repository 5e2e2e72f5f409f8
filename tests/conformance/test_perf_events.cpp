// The perf event stream and its sinks, on a golden tiny model split between
// the CPU and the test accelerator: one perf-log line per executed node and
// copy, a valid Chrome trace with a track per backend and for the copies,
// and summary totals that agree with the events.
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
    for (const char* key : {"op", "kernel", "backend", "tensor", "shape", "dtype", "duration_us", "start_us", "end_us",
                            "flops", "bytes"})
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

  ASSERT_EQ(test::run_command(test::opal_binary() + " perplexity -m " +
                                  test::shared_path("models/stories260K.gguf") + " -f " +
                                  test::shared_path("golden/story.txt") + " -c 128 -t 1 --summary 2>&1",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("perf summary: per backend"), std::string::npos) << out;
  // a path that cannot be written is an error before anything runs
  EXPECT_NE(test::run_command(test::opal_binary() + " run -m " + model + " -p hi -n 1 --perf-log /nonexistent/x.log 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("--perf-log"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
