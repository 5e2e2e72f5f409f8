// `opal bench` smoke runs on stories260K (CI): every output format is well
// formed and has the rows the flags ask for (llama-bench's layout and schema,
// ../shared/docs/conventions.md section 2); bad flags fail with a clear message.
// No timing is asserted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/gguf.h"
#include "support/test_support.h"

using nlohmann::json;

namespace {

struct BenchRun {
  int status = -1;
  std::string out;
};

const std::string& model() {
  static const std::string m = opal::test::shared_path("models/stories260K.gguf");
  return m;
}

BenchRun bench(const std::string& args) {
  BenchRun r;
  // stdout only for the table (the conditions block is on stdout too); stderr dropped.
  r.status = opal::test::run_command(opal::test::opal_binary() + " bench " + args + " 2>/dev/null", &r.out);
  return r;
}

BenchRun bench_err(const std::string& args) {
  BenchRun r;
  r.status = opal::test::run_command(opal::test::opal_binary() + " bench " + args, &r.out);
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

// The cells of a markdown table row.
std::vector<std::string> cells(const std::string& line) {
  auto parts = split(line, '|');
  std::vector<std::string> out;
  for (size_t i = 1; i < parts.size(); ++i) out.push_back(trim(parts[i]));
  return out;
}

// --device-stats: one line per row and device on stderr, the CPU's counters per pass; at -t 2 the
// decode's MUL_MATs ran as pool jobs (each token has some), at -t 1 none did.
TEST(Bench, DeviceStatsPerRow) {
  // stderr through a pipe, the table (stdout) dropped.
  BenchRun r;
  r.status = opal::test::run_command(opal::test::opal_binary() + " bench -m " + model() +
                                         " -p 0 -n 4 -r 1 -t 1,2 --no-bw --device-stats 2>&1 >/dev/null | cat",
                                     &r.out);
  ASSERT_EQ(r.status, 0) << r.out;
  std::smatch m;
  const std::regex t1("tg4 t1 cpu per pass: pool_jobs=([0-9.]+) .*busy_us_0=");
  const std::regex t2("tg4 t2 cpu per pass: pool_jobs=([0-9.]+) .*busy_us_0=[0-9.]+ busy_us_1=");
  ASSERT_TRUE(std::regex_search(r.out, m, t1)) << r.out;
  EXPECT_EQ(std::stod(m[1]), 0.0);
  ASSERT_TRUE(std::regex_search(r.out, m, t2)) << r.out;
  EXPECT_GE(std::stod(m[1]), 1.0);
}

TEST(Bench, MarkdownTable) {
  const BenchRun r = bench("-m " + model() + " -p 16 -n 8 -r 2 -t 1,2 --no-bw");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> table;
  for (const auto& line : split(r.out, '\n'))
    if (!line.empty() && line[0] == '|') table.push_back(line);
  ASSERT_EQ(table.size(), 2u + 4u) << r.out;  // header, rule, 2 threads x (pp16, tg8)
  const auto head = cells(table[0]);
  const std::vector<std::string> want = {"model", "size", "params", "backend", "threads",
                                         "lm",    "test", "GB/s",   "% bw",    "t/s"};
  EXPECT_EQ(head, want);
  EXPECT_TRUE(std::regex_match(table[1], std::regex("\\|( :?-+:? \\|)+"))) << table[1];
  const std::regex ts("[0-9]+\\.[0-9]{2} ± [0-9]+\\.[0-9]{2}");
  std::multiset<std::string> tests;
  std::set<std::string> threads;
  for (size_t i = 2; i < table.size(); ++i) {
    const auto c = cells(table[i]);
    ASSERT_EQ(c.size(), head.size()) << table[i];
    EXPECT_EQ(c[0].rfind("llama ", 0), 0u) << c[0];  // "<arch> <size> <type>"
    EXPECT_TRUE(std::regex_match(c[1], std::regex("[0-9.]+ (MiB|GiB)"))) << c[1];
    EXPECT_TRUE(std::regex_match(c[2], std::regex("[0-9.]+ [KMB]"))) << c[2];
    EXPECT_EQ(c[3], "CPU");
    threads.insert(c[4]);
    tests.insert(c[6]);
    EXPECT_EQ(c[8], "-");  // --no-bw: no % of bandwidth
    EXPECT_TRUE(std::regex_match(c[9], ts)) << c[9];
  }
  EXPECT_EQ(threads, (std::set<std::string>{"1", "2"}));
  EXPECT_EQ(tests, (std::multiset<std::string>{"pp16", "pp16", "tg8", "tg8"}));
  EXPECT_NE(r.out.find("build: "), std::string::npos);
  for (const char* k : {"conditions:", "- cpu: ", "- isa: ", "- governor: ", "- transparent huge pages: ",
                        "- measured read bandwidth: not measured", "- load average before / after: "})
    EXPECT_NE(r.out.find(k), std::string::npos) << k;
}

TEST(Bench, JsonSchemaAndStatistics) {
  const BenchRun r = bench("-m " + model() + " -p 8 -n 4 --pg 8,4 -r 3 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  std::vector<std::string> names;
  for (const auto& x : j) {
    for (const char* k : {"build_commit",
                          "cpu_info",
                          "backends",
                          "model_filename",
                          "model_type",
                          "model_size",
                          "model_n_params",
                          "n_batch",
                          "n_ubatch",
                          "n_threads",
                          "type_k",
                          "type_v",
                          "n_prompt",
                          "n_gen",
                          "test_time",
                          "avg_ns",
                          "stddev_ns",
                          "avg_ts",
                          "stddev_ts",
                          "samples_ns",
                          "samples_ts",
                          "load_mode",
                          "load_time_s",
                          "achieved_gbps",
                          "measured_bandwidth_gbps",
                          "bandwidth_pct",
                          "isa",
                          "governor"})
      EXPECT_TRUE(x.contains(k)) << k;
    names.push_back(x["test"]);
    ASSERT_EQ(x["samples_ns"].size(), 3u);
    ASSERT_EQ(x["samples_ts"].size(), 3u);
    // avg_ts is the mean of the per-sample t/s; samples_ts = tokens / samples_ns.
    const double tokens = x["n_prompt"].get<double>() + x["n_gen"].get<double>();
    double mean = 0;
    for (size_t i = 0; i < 3; ++i) {
      const double ns = x["samples_ns"][i].get<double>(), t = x["samples_ts"][i].get<double>();
      ASSERT_GT(ns, 0);
      EXPECT_NEAR(t, tokens * 1e9 / ns, 1e-6 * t);
      mean += t / 3;
    }
    EXPECT_NEAR(x["avg_ts"].get<double>(), mean, 1e-6 * mean);
    EXPECT_GE(x["stddev_ts"].get<double>(), 0.0);
    EXPECT_GT(x["measured_bandwidth_gbps"].get<double>(), 0.0);
    EXPECT_EQ(x["n_threads"], 1);
    EXPECT_EQ(x["model_filename"], model());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"pp8", "tg4", "pp8+tg4"}));
}

// GB/s and % bw count the weights a decode step streams: every tensor, less the tables it reads one row of
// per token (token_embd beside a separate output matrix; Gemma 4's per-layer embeddings). The expected
// bytes are summed here from the file's tensor list.
TEST(Bench, StreamedWeightBytesLeaveOutTablesReadByRow) {
  for (const char* name : {"golden/models/tiny-gemma4-q8_0.gguf", "golden/models/tiny-llama-q8_0.gguf"}) {
    const std::string path = opal::test::shared_path(name);
    const opal::gguf::File g = opal::gguf::File::open(path);
    uint64_t all = 0, embd = 0, per_layer = 0;
    bool output = false;
    for (const auto& t : g.tensors()) {
      all += t.nbytes;
      if (t.name == "token_embd.weight") embd = t.nbytes;
      if (t.name == "per_layer_token_embd.weight") per_layer = t.nbytes;
      if (t.name == "output.weight") output = true;
    }
    const uint64_t expected = all - (output ? embd : 0) - per_layer;
    const BenchRun r = bench("-m " + path + " -p 0 -n 2 -r 1 -t 1 --no-bw -o json");
    ASSERT_EQ(r.status, 0) << name << ": " << r.out;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 1u) << name;
    EXPECT_EQ(j[0]["weight_bytes_per_token"].get<uint64_t>(), expected) << name;
    if (std::string(name).find("gemma4") != std::string::npos) {
      EXPECT_GT(per_layer, 0u) << "the table this test is about";
    }
  }
}

TEST(Bench, JsonlAndCsv) {
  const BenchRun l = bench("-m " + model() + " -p 8 -n 4 -r 1 -t 1 --no-bw -o jsonl");
  ASSERT_EQ(l.status, 0) << l.out;
  const auto lines = split(l.out, '\n');
  ASSERT_EQ(lines.size(), 2u) << l.out;
  for (const auto& line : lines) EXPECT_TRUE(json::parse(line).is_object());

  const BenchRun c = bench("-m " + model() + " -p 8 -n 4 -r 1 -t 1,2 --no-bw -o csv");
  ASSERT_EQ(c.status, 0) << c.out;
  const auto rows = split(c.out, '\n');
  ASSERT_EQ(rows.size(), 1u + 4u) << c.out;
  const auto header = split(rows[0], ',');
  EXPECT_EQ(header[0], "build_commit");
  EXPECT_NE(std::find(header.begin(), header.end(), "avg_ts"), header.end());
  EXPECT_NE(std::find(header.begin(), header.end(), "load_mode"), header.end());
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(rows[i].rfind("\"", 0), 0u) << rows[i];
}

TEST(Bench, LoadModesAndPlot) {
  const std::string svg = opal::test::temp_dir() + "/bench.svg";
  const BenchRun r =
      bench("-m " + model() + " -p 0 -n 4 -r 1 -t 1 --no-bw --lm mmap,read,huge --mlock -o json --plot " + svg);
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  std::vector<std::string> modes;
  for (const auto& x : j) modes.push_back(x["load_mode"]);
  EXPECT_EQ(modes, (std::vector<std::string>{"lock", "mmap", "read", "huge"}));
  std::ifstream f(svg);
  std::stringstream s;
  s << f.rdbuf();
  const std::string text = s.str();
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  size_t bars = 0;
  for (size_t p = text.find("<rect x="); p != std::string::npos; p = text.find("<rect x=", p + 1)) ++bars;
  EXPECT_EQ(bars, 4u);
}

// -d (llama-bench's depth) and --fa 0,1: a row per (fa, depth, test), named as llama-bench names it, with the
// fa and type columns in the table and n_depth / flash_attn / type_v in the json.
TEST(Bench, DepthAndFlashAttentionRows) {
  const BenchRun r = bench("-m " + model() + " -p 8 -n 4 -d 0,24 --fa 0,1 -r 1 -t 1 --no-bw -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 8u);
  std::vector<std::string> names;
  for (const auto& x : j) {
    names.push_back(x["test"].get<std::string>() + (x["flash_attn"].get<bool>() ? " fa" : ""));
    EXPECT_EQ(x["type_v"], "f16");
    EXPECT_GT(x["avg_ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"pp8", "tg4", "pp8 @ d24", "tg4 @ d24", "pp8 fa", "tg4 fa", "pp8 @ d24 fa",
                                             "tg4 @ d24 fa"}));
  EXPECT_EQ(j[2]["n_depth"], 24);
  // A quantized cache (stories260K's head size 8 is not whole 32-blocks: a clear error) and the md columns.
  const BenchRun q = bench_err("-m " + model() + " -p 8 -n 0 --ctk q8_0 --ctv q8_0 --fa 1 -r 1 --no-bw");
  EXPECT_NE(q.status, 0);
  EXPECT_NE(q.out.find("head size 8 is not a multiple of 32"), std::string::npos) << q.out;
  const BenchRun md = bench("-m " + model() + " -p 8 -n 0 -d 16 --fa 1 --ctv f32 -r 1 -t 1 --no-bw");
  ASSERT_EQ(md.status, 0) << md.out;
  EXPECT_NE(md.out.find("| type_v | fa |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| f32    |  1 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("pp8 @ d16"), std::string::npos) << md.out;
}

// -d fills the cache once per (fa, cache types, depth), shared by that depth's tests (pp and tg here), with its
// progress on stderr: one fill line per depth and fa, none at depth 0.
TEST(Bench, DepthIsFilledOncePerDepthAndShown) {
  const BenchRun r =
      bench_err("-m " + model() + " -p 8 -n 4 --pg 8,4 -d 0,40,24 --fa 0,1 -r 2 -t 1 --no-bw --progress");
  ASSERT_EQ(r.status, 0) << r.out;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = r.out.find(what); p != std::string::npos; p = r.out.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("filling the cache to depth 40: 40 tokens"), 2u) << r.out;
  EXPECT_EQ(count("filling the cache to depth 24: 24 tokens"), 2u) << r.out;
  EXPECT_EQ(count("filling the cache to depth 0"), 0u) << r.out;
  EXPECT_EQ(count("opal bench: benchmark "), 18u) << r.out;  // 3 tests x 3 depths x 2 fa, each run
}

// --ctk / --ctv take lists, as llama-bench's -ctk / -ctv: a row per (K, V) pair (the product of the lists), each
// K type paired with itself without --ctv; a bad entry or a quantized V with fa 0 anywhere in the lists fails.
TEST(Bench, CacheTypeListsGiveARowPerPair) {
  auto types = [](const BenchRun& r) {
    std::vector<std::string> v;
    for (const auto& x : json::parse(r.out))
      v.push_back(x["type_k"].get<std::string>() + "/" + x["type_v"].get<std::string>());
    return v;
  };
  const BenchRun same = bench("-m " + model() + " -p 8 -n 0 --ctk f16,f32 -r 1 -t 1 --no-bw -o json");
  ASSERT_EQ(same.status, 0) << same.out;
  EXPECT_EQ(types(same), (std::vector<std::string>{"f16/f16", "f32/f32"}));
  const BenchRun product = bench("-m " + model() + " -p 8 -n 0 --ctk f16,bf16 --ctv f16,f32 -r 1 -t 1 --no-bw -o json");
  ASSERT_EQ(product.status, 0) << product.out;
  EXPECT_EQ(types(product), (std::vector<std::string>{"f16/f16", "f16/f32", "bf16/f16", "bf16/f32"}));
  const BenchRun bad = bench_err("-m " + model() + " -p 8 -n 0 --ctk f16,q9 -r 1 --no-bw");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("-ctk must be f16, bf16, f32, q8_0 or q4_0, got 'q9'"), std::string::npos) << bad.out;
  const BenchRun v = bench_err("-m " + model() + " -p 8 -n 0 --ctv f16,q4_0 --fa 0,1 -r 1 --no-bw");
  EXPECT_NE(v.status, 0);
  EXPECT_NE(v.out.find("-ctv q4_0 needs flash attention: pass -fa 1"), std::string::npos) << v.out;
}

// --batch-order lanes|llama (the flag form of $OPAL_BATCH_ORDER; --q8-0-order is its older name) is named on the
// isa line; the default (auto: per weight type) is not.
TEST(Bench, BatchOrderFlagIsShownOnTheIsaLine) {
  for (const char* flag : {"--batch-order", "--q8-0-order"}) {
    for (const char* order : {"lanes", "llama"}) {
      const BenchRun run = bench("-m " + model() + " -p 8 -n 0 -r 1 -t 1 --no-bw " + flag + " " + order);
      ASSERT_EQ(run.status, 0) << run.out;
      EXPECT_NE(run.out.find(std::string(", batch order ") + order), std::string::npos) << flag << "\n" << run.out;
    }
    const BenchRun by_type = bench("-m " + model() + " -p 8 -n 0 -r 1 -t 1 --no-bw " + flag + " auto");
    ASSERT_EQ(by_type.status, 0) << by_type.out;
    EXPECT_NE(by_type.out.find("- isa: "), std::string::npos) << by_type.out;
    EXPECT_EQ(by_type.out.find("batch order"), std::string::npos) << flag << "\n" << by_type.out;
  }
}

TEST(Bench, BadFlagsFailClearly) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"-p 8", "-m"},
      {"-m " + model() + " -o xml", "md, csv, json or jsonl"},
      {"-m " + model() + " -r 0", "-r"},
      {"-m " + model() + " -p abc", "'abc' is not a number"},
      {"-m " + model() + " -t 0", "-t"},
      {"-m " + model() + " --lm dio", "unknown load mode 'dio'"},
      {"-m " + model() + " --pg 512", "PROMPT,GEN"},
      {"-m " + model() + " -p 0 -n 0", "no tests"},
      {"-m /nonexistent/model.gguf -p 8 -n 0 --no-bw", "/nonexistent/model.gguf"},
      {"-m " + model() + " --ctk q4_1", "-ctk"},
      {"-m " + model() + " --ctv q8_0", "-ctv q8_0 needs flash attention: pass -fa 1"},
      {"-m " + model() + " --ctk q8_0 --fa 1 --ctv q5_0", "-ctv must be f16, bf16, f32, q8_0 or q4_0"},
      {"-m " + model() + " --fa auto", "bench takes 0 or 1"},
      {"-m " + model() + " -d -5", "-d"},
      {"-m " + model() + " --bogus", "--bogus"},
      {"-m " + model() + " --q8-0-order fast", "unknown batch order 'fast' (choose auto, llama or lanes"},
      {"-m " + model() + " --batch-order fast", "unknown batch order 'fast' (choose auto, llama or lanes"},
      {"-m " + model() + " --isa avx3", "unknown ISA 'avx3' (choose scalar, avx2, avx2-vnni, avx512 or neon)"},
  };
  for (const auto& c : cases) {
    const BenchRun r = bench_err(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << c.args << "\n" << r.out;  // an error, not a crash
  }
}

}  // namespace

namespace {

// `opal bench --backend rocket` runs the prompt's matmuls on the NPU emulator
// and prints the performance model's RK3588 prediction beside the host figures.
TEST(Bench, RocketBackendPrintsThePredictedNpuTime) {
  const std::string m = opal::test::golden_model("tiny-llama-q8_0");
  const BenchRun r = bench("-m " + m + " -p 64 -n 2 -r 1 -t 1 --backend rocket --no-bw");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("CPU,rocket"), std::string::npos) << r.out;
  const size_t at = r.out.find("rocket (RK3588 NPU");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string tail = r.out.substr(at);
  EXPECT_NE(tail.find("| pp64 |"), std::string::npos) << tail;
  EXPECT_EQ(tail.find("| tg2 |"), std::string::npos) << "one-token decodes stay on the CPU (min batch)";
  // Without the backend there is no prediction.
  const BenchRun cpu = bench("-m " + m + " -p 64 -n 0 -r 1 -t 1 --no-bw");
  ASSERT_EQ(cpu.status, 0) << cpu.out;
  EXPECT_EQ(cpu.out.find("rocket (RK3588 NPU"), std::string::npos);
}

}  // namespace
