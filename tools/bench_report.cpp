// Bench results: statistics, machine probes, and the output formats
// (see bench_report.h). The markdown table follows llama-bench's layout:
// | model | size | params | backend | threads | <non-default params> | test | t/s |
// with Opal's columns lm (load mode), GB/s and % bw appended before t/s.
#include "tools/bench_report.h"
#include "core/version.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace opal::tools {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

double bandwidth_for(const BenchConditions& c, int threads) {
  auto it = c.bandwidth_gbps.find(threads);
  return it == c.bandwidth_gbps.end() ? 0.0 : it->second;
}

nlohmann::ordered_json to_json(const BenchResult& r, const BenchConditions& c) {
  nlohmann::ordered_json j;
  j["build_commit"] = c.commit;
  j["build_number"] = 0;
  j["cpu_info"] = c.cpu;
  j["gpu_info"] = "";
  j["backends"] = r.backend;
  j["model_filename"] = r.model_filename;
  j["model_type"] = r.model_type;
  j["model_size"] = r.model_size;
  j["model_n_params"] = r.model_n_params;
  j["n_batch"] = r.n_batch;
  j["n_ubatch"] = r.n_ubatch;
  j["n_threads"] = r.n_threads;
  j["type_k"] = r.type_k;
  j["type_v"] = r.type_v;
  j["flash_attn"] = r.flash_attn != 0;
  j["n_depth"] = r.n_depth;
  j["n_gpu_layers"] = 0;
  j["use_mmap"] = r.load_mode == "mmap" || r.load_mode == "populate";
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["test_time"] = r.test_time;
  j["avg_ns"] = uint64_t(std::llround(r.avg_ns()));
  j["stddev_ns"] = uint64_t(std::llround(r.stddev_ns()));
  j["avg_ts"] = r.avg_ts();
  j["stddev_ts"] = r.stddev_ts();
  j["samples_ns"] = r.samples_ns;
  j["samples_ts"] = r.samples_ts();
  // Opal's additions.
  j["test"] = r.test_name();
  j["load_mode"] = r.load_mode;
  j["load_time_s"] = r.load_seconds;
  j["weight_bytes_per_token"] = r.weight_bytes_per_token;
  j["achieved_gbps"] = r.achieved_gbps();
  const double bw = bandwidth_for(c, r.n_threads);
  j["measured_bandwidth_gbps"] = bw;
  j["bandwidth_pct"] = bw > 0 ? 100.0 * r.achieved_gbps() / bw : 0.0;
  j["isa"] = c.isa;
  j["kernels"] = c.kernels;
  j["governor"] = c.governor;
  j["thp"] = c.thp;
  j["kernel"] = c.kernel;
  j["load_avg_before"] = c.load_before;
  j["load_avg_after"] = c.load_after;
  return j;
}

}  // namespace

std::string BenchResult::test_name() const {
  const std::string depth = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : "";
  if (n_prompt > 0 && n_gen > 0) return fmt::format("pp{}+tg{}{}", n_prompt, n_gen, depth);
  if (n_prompt > 0) return fmt::format("pp{}{}", n_prompt, depth);
  return fmt::format("tg{}{}", n_gen, depth);
}

double BenchResult::avg_ns() const {
  if (samples_ns.empty()) return 0.0;
  double s = 0;
  for (uint64_t x : samples_ns) s += double(x);
  return s / double(samples_ns.size());
}

static double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(v.size() - 1));
}

double BenchResult::stddev_ns() const {
  std::vector<double> v(samples_ns.begin(), samples_ns.end());
  return stddev(v);
}

std::vector<double> BenchResult::samples_ts() const {
  std::vector<double> out;
  for (uint64_t ns : samples_ns) out.push_back(ns ? 1e9 * double(n_prompt + n_gen) / double(ns) : 0.0);
  return out;
}

double BenchResult::avg_ts() const {
  const auto ts = samples_ts();
  if (ts.empty()) return 0.0;
  double s = 0;
  for (double x : ts) s += x;
  return s / double(ts.size());
}

double BenchResult::stddev_ts() const { return stddev(samples_ts()); }

double BenchResult::achieved_gbps() const {
  const double secs = avg_ns() / 1e9;
  if (secs <= 0) return 0.0;
  const int64_t passes = (n_prompt + n_ubatch - 1) / std::max<int64_t>(1, n_ubatch) + n_gen;
  return double(weight_bytes_per_token) * double(passes) / secs / 1e9;
}

std::string read_loadavg() {
  std::istringstream in(read_first_line("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "n/a" : a + " " + b + " " + c;
}

BenchConditions probe_conditions() {
  BenchConditions c;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      c.cpu = trim(line.substr(line.find(':') + 1));
      break;
    }
  }
  if (c.cpu.empty()) c.cpu = "unknown CPU";
  c.cpu += fmt::format(" ({} threads)", std::max(1u, std::thread::hardware_concurrency()));
  c.governor = trim(read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"));
  if (c.governor.empty()) c.governor = "n/a";
  const std::string thp = read_first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  const auto a = thp.find('['), b = thp.find(']');
  c.thp = a != std::string::npos && b != std::string::npos ? thp.substr(a + 1, b - a - 1) : "n/a";
  struct utsname u {};
  c.kernel = uname(&u) == 0 ? std::string(u.sysname) + " " + u.release : "n/a";
  c.commit = git_commit();
  c.load_before = read_loadavg();
  return c;
}

// The read-bandwidth probe. It should read as fast as the machine allows, so
// that `% bw` is a share of a real ceiling: a 256 MiB anonymous buffer backed
// by transparent huge pages where the kernel grants them (as `--lm huge`
// weights are), each thread streaming its slice 64 bytes a step with the
// widest loads the host has and four independent sums, with and without a
// software prefetch 1 KiB ahead; the best pass of each form wins.
namespace {

constexpr size_t kProbeBytes = size_t(256) << 20;
constexpr size_t kProbePrefetchBytes = 1024;

uint64_t read_span_portable(const uint64_t* p, size_t n, bool prefetch) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (prefetch) __builtin_prefetch(reinterpret_cast<const char*>(p + i) + kProbePrefetchBytes);
    s0 += p[i] + p[i + 4], s1 += p[i + 1] + p[i + 5], s2 += p[i + 2] + p[i + 6], s3 += p[i + 3] + p[i + 7];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_span_avx2(const uint64_t* p, size_t n, bool prefetch) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {  // two cache lines a step
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(p + i) + kProbePrefetchBytes, _MM_HINT_T0);
    const auto* v = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(v), _mm256_load_si256(v + 1)));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_load_si256(v + 2), _mm256_load_si256(v + 3)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(a0, a1));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + read_span_portable(p + i, n - i, false);
}
#endif

uint64_t read_span(const uint64_t* p, size_t n, bool prefetch) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return read_span_avx2(p, n, prefetch);
#endif
  return read_span_portable(p, n, prefetch);
}

}  // namespace

double measure_read_bandwidth(int n_threads) {
  n_threads = std::max(1, n_threads);
  const size_t n = kProbeBytes / sizeof(uint64_t);
  void* mem = mmap(nullptr, kProbeBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 0.0;
  madvise(mem, kProbeBytes, MADV_HUGEPAGE);  // advisory: 4 KiB pages where THP is off
  auto* buf = static_cast<uint64_t*>(mem);
  for (size_t i = 0; i < n; ++i) buf[i] = i;
  std::vector<uint64_t> sinks(size_t(n_threads) * 8);
  double best = 0.0;
  for (int pass = 0; pass < 6; ++pass) {
    const bool prefetch = pass % 2 == 1;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    auto reader = [&](int t) {
      // Slices start on a 4 KiB boundary so the wide loads stay aligned.
      const size_t page = 4096 / sizeof(uint64_t);
      const size_t b = n / page * size_t(t) / size_t(n_threads) * page;
      const size_t e = t + 1 == n_threads ? n : n / page * size_t(t + 1) / size_t(n_threads) * page;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      sinks[size_t(t) * 8] = read_span(buf + b, e - b, prefetch);
    };
    for (int t = 1; t < n_threads; ++t) threads.emplace_back(reader, t);
    while (ready.load() < n_threads - 1) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    reader(0);
    for (auto& th : threads) th.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 0) best = std::max(best, double(kProbeBytes) / secs / 1e9);
  }
  munmap(mem, kProbeBytes);
  return best;
}

std::string format_size(uint64_t bytes) {
  const double gib = double(bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1.0) return fmt::format("{:.2f} GiB", gib);
  return fmt::format("{:.2f} MiB", double(bytes) / (1024.0 * 1024.0));
}

std::string format_params(uint64_t params) {
  if (params >= 1000000000ull) return fmt::format("{:.2f} B", double(params) / 1e9);
  if (params >= 1000000ull) return fmt::format("{:.2f} M", double(params) / 1e6);
  return fmt::format("{:.2f} K", double(params) / 1e3);
}

std::string format_markdown(const std::vector<BenchResult>& results, const BenchConditions& c, const BenchDefaults& d) {
  bool show_batch = false, show_ubatch = false, show_ctk = false, show_ctv = false, show_fa = false;
  for (const auto& r : results) {
    show_batch |= r.n_batch != d.n_batch;
    show_ubatch |= r.n_ubatch != d.n_ubatch;
    show_ctk |= r.type_k != d.type_k;
    show_ctv |= r.type_v != d.type_v;
    show_fa |= r.flash_attn != d.flash_attn;
  }
  std::vector<std::string> head = {"model", "size", "params", "backend", "threads"};
  if (show_batch) head.push_back("n_batch");
  if (show_ubatch) head.push_back("n_ubatch");
  if (show_ctk) head.push_back("type_k");
  if (show_ctv) head.push_back("type_v");
  if (show_fa) head.push_back("fa");
  for (const char* h : {"lm", "test", "GB/s", "% bw", "t/s"}) head.push_back(h);
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : results) {
    std::vector<std::string> row = {r.model_type, format_size(r.model_size), format_params(r.model_n_params), r.backend,
                                    std::to_string(r.n_threads)};
    if (show_batch) row.push_back(std::to_string(r.n_batch));
    if (show_ubatch) row.push_back(std::to_string(r.n_ubatch));
    if (show_ctk) row.push_back(r.type_k);
    if (show_ctv) row.push_back(r.type_v);
    if (show_fa) row.push_back(std::to_string(r.flash_attn));
    row.push_back(r.load_mode);
    row.push_back(r.test_name());
    row.push_back(fmt::format("{:.2f}", r.achieved_gbps()));
    const double bw = bandwidth_for(c, r.n_threads);
    row.push_back(bw > 0 ? fmt::format("{:.1f}", 100.0 * r.achieved_gbps() / bw) : "-");
    row.push_back(fmt::format("{:.2f} ± {:.2f}", r.avg_ts(), r.stddev_ts()));
    rows.push_back(std::move(row));
  }
  // Column widths (count UTF-8 code points, so "±" is one).
  auto width = [](const std::string& s) {
    size_t w = 0;
    for (unsigned char ch : s) w += (ch & 0xC0) != 0x80;
    return w;
  };
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    w[i] = width(head[i]);
    for (const auto& row : rows) w[i] = std::max(w[i], width(row[i]));
  }
  const size_t first_numeric = 1;  // size onwards are right-aligned, as llama-bench does (except backend/lm/test)
  auto is_left = [&](size_t i) {
    const std::string& h = head[i];
    return i < first_numeric || h == "backend" || h == "lm" || h == "test" || h == "type_k" || h == "type_v";
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(w[i] - width(cells[i]), ' ');
      s += ' ';
      s += is_left(i) ? cells[i] + pad : pad + cells[i];
      s += " |";
    }
    return s + "\n";
  };
  std::string out = line(head);
  out += "|";
  for (size_t i = 0; i < head.size(); ++i) {
    out += ' ';
    out += is_left(i) ? std::string(w[i], '-') + " |" : std::string(w[i] - 1, '-') + ": |";
  }
  out += "\n";
  for (const auto& row : rows) out += line(row);
  out += fmt::format("\nbuild: {} (opal)\n", c.commit);
  out += "\nconditions:\n";
  out += fmt::format("- cpu: {}\n", c.cpu);
  out += fmt::format("- isa: {}\n", c.isa);
  out += fmt::format("- kernels: {}\n", c.kernels);
  out += fmt::format("- governor: {}\n", c.governor);
  out += fmt::format("- transparent huge pages: {}\n", c.thp);
  out += fmt::format("- kernel: {}\n", c.kernel);
  std::string bw;
  for (const auto& [t, g] : c.bandwidth_gbps)
    bw += fmt::format("{}{:.1f} GB/s ({} threads)", bw.empty() ? "" : ", ", g, t);
  out += fmt::format("- measured read bandwidth: {}\n", bw.empty() ? "not measured" : bw);
  out += fmt::format("- load average before / after: {} / {}\n", c.load_before, c.load_after);
  return out;
}

std::string format_csv(const std::vector<BenchResult>& results, const BenchConditions& c) {
  std::string out;
  bool header = false;
  for (const auto& r : results) {
    const auto j = to_json(r, c);
    if (!header) {
      std::string h;
      for (auto it = j.begin(); it != j.end(); ++it) h += (h.empty() ? "" : ",") + it.key();
      out += h + "\n";
      header = true;
    }
    std::string line;
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string cell;
      if (it->is_string()) {
        cell = csv_quote(it->get<std::string>());
      } else if (it->is_array()) {
        std::string joined;
        for (const auto& x : *it) {
          if (!joined.empty()) joined += ' ';
          joined += x.dump();
        }
        cell = csv_quote(joined);
      } else {
        cell = it->dump();
      }
      line += (it == j.begin() ? "" : ",") + cell;
    }
    out += line + "\n";
  }
  return out;
}

std::string format_json(const std::vector<BenchResult>& results, const BenchConditions& c) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& r : results) arr.push_back(to_json(r, c));
  return arr.dump(2) + "\n";
}

std::string format_jsonl(const std::vector<BenchResult>& results, const BenchConditions& c) {
  std::string out;
  for (const auto& r : results) out += to_json(r, c).dump() + "\n";
  return out;
}

std::string format_svg(const std::vector<BenchResult>& results, const BenchConditions& c) {
  // Horizontal bars: one per result, mean t/s with a ±sd whisker.
  const int bar_h = 22, gap = 8, left = 360, plot_w = 520, top = 50;
  const int height = top + int(results.size()) * (bar_h + gap) + 60;
  double max_ts = 1.0;
  for (const auto& r : results) max_ts = std::max(max_ts, r.avg_ts() + r.stddev_ts());
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      left + plot_w + 120, height);
  s += fmt::format("<text x=\"10\" y=\"20\" font-size=\"15\">opal bench: tokens per second (mean ± sd)</text>\n");
  s += fmt::format("<text x=\"10\" y=\"38\" fill=\"#555\">{}; {}; build {}</text>\n", xml_escape(c.cpu),
                   xml_escape(c.isa), xml_escape(c.commit));
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const int y = top + int(i) * (bar_h + gap);
    const double ts = r.avg_ts(), sd = r.stddev_ts();
    const double w = plot_w * ts / max_ts;
    const std::string label = fmt::format("{} | {} | t={} | {}", r.model_type, r.test_name(), r.n_threads, r.load_mode);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8, y + 15, xml_escape(label));
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", left, y, w, bar_h,
                     r.n_gen > 0 && r.n_prompt == 0 ? "#4e79a7" : "#f28e2b");
    const double x0 = left + plot_w * std::max(0.0, ts - sd) / max_ts, x1 = left + plot_w * (ts + sd) / max_ts;
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", x0, x1,
                     y + bar_h / 2, y + bar_h / 2);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\">{:.2f}</text>\n", x1 + 6, y + 15, ts);
  }
  s += "</svg>\n";
  return s;
}

std::string format_device_predictions(const std::vector<BenchResult>& results) {
  std::vector<std::string> devices;  // in order of first appearance
  for (const auto& r : results)
    for (const auto& p : r.predictions)
      if (std::find(devices.begin(), devices.end(), p.device) == devices.end()) devices.push_back(p.device);
  std::string out;
  for (const std::string& dev : devices) {
    std::string table;
    bool roofline = false;  // a bandwidth-floor column when the device reports one (ET)
    for (const auto& r : results)
      for (const auto& p : r.predictions) roofline = roofline || (p.device == dev && p.roofline_s > 0);
    for (const auto& r : results)
      for (const auto& p : r.predictions) {
        if (p.device != dev || p.nodes_run == 0 || p.predicted_s <= 0) continue;
        if (table.empty())
          table = fmt::format(
              "\n{} ({}): predicted time of the\n{}\n\n"
              "| model | threads | test | {} / run | predicted ms / run | {} t/s |{}\n"
              "| --- | ---: | --- | ---: | ---: | ---: |{}\n",
              p.device, p.model, p.scope, p.nodes_label, p.only_label,
              roofline ? " bandwidth roofline t/s (bytes / bandwidth) |" : "", roofline ? " ---: |" : "");
        const double tokens = double(r.n_prompt + r.n_gen);
        table += fmt::format("| {} | {} | {} | {} | {:.2f} | {:.1f} |", r.model_type, r.n_threads, r.test_name(),
                             p.nodes_run, p.predicted_s * 1e3, tokens / p.predicted_s);
        if (roofline) table += p.roofline_s > 0 ? fmt::format(" {:.1f} |", tokens / p.roofline_s) : " - |";
        table += "\n";
      }
    out += table;
  }
  return out;
}

}  // namespace opal::tools
