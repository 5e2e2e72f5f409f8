// `opal bench -m MODEL[,MODEL...] [-p 512] [-n 128] [--pg 512,128] [-r 5]
//             [-t 1,2] [-b 2048] [--ub 512] [-d 0,4096] [--fa 0,1] [--ctk f16,q8_0] [--ctv T,...]
//             [--lm huge,mmap] [-o md|csv|json|jsonl]
//             [--plot FILE.svg] [--idle SECONDS] [--no-warmup] [--no-bw] [--isa NAME]`
// llama-bench for Opal (docs/bench.md). List flags (comma lists or ranges
// first-last[+step]) expand to a matrix; for each model and load mode the
// model is loaded once, then each (n_batch, n_ubatch, threads) runs every
// test. A test is:
//   pp<P>: one prompt of P random tokens, decoded in n_batch chunks;
//   tg<N>: N single-token decodes from an empty cache (no sampling);
//   pp<P>+tg<N>: both, timed together.
// At a depth D (-d, llama-bench's --n-depth) the cache holds D tokens of the
// same sequence before each timed run (filled once per depth and shared by the
// tests of that depth, untimed, its progress on stderr; before each run the
// filled state is back: DepthFill), and the row is named as llama-bench names
// it: "pp512 @ d4096". --fa 0|1 (a list) is
// llama-bench's -fa: off = the materialized attention, on = the tiled one.
// --ctk / --ctv (lists, as llama-bench's -ctk / -ctv) give each (K, V) cache
// type pair its rows; without --ctv each K type is paired with itself.
// One untimed warm-up first (the full prompt for pp, one token for tg), then
// -r timed repetitions, each from an empty KV cache. Random tokens stand in
// for text, so tokenization and sampling are excluded, as in llama-bench.
// Besides t/s, each row reports the weight bytes streamed per second and the
// share of the machine's read bandwidth (measured at start).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/error.h"
#include "core/quant/recipe.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "runtime/generation.h"
#include "tools/backend_options.h"
#include "tools/bench_report.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/isa_option.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"

namespace opal::tools {
namespace {

struct BenchOptions {
  PerfOptions perf;        // --perf-log, --trace, --summary, --shadow
  BackendOptions backend;  // --backend
  std::vector<std::string> models;
  std::vector<std::string> n_prompt = {"512"}, n_gen = {"128"}, pg, threads, n_batch = {"2048"}, n_ubatch = {"512"};
  std::vector<std::string> load_modes, depths = {"0"}, flash = {"0"};
  std::vector<std::string> type_k = {"f16"}, type_v;
  std::string output = "md", plot;
  int repetitions = 5;
  double idle_seconds = 0;
  bool no_mmap = false, mlock = false, no_warmup = false, no_bw = false, progress = false, no_repack = false;
  bool device_stats = false;  // --device-stats: each device's counters per pass of a row, on stderr
};

// "512", "1,2,4", "1-4", "128-512+128" (llama-bench's list syntax).
std::vector<int64_t> parse_int_list(const std::vector<std::string>& items, const char* flag, int64_t min_value) {
  std::vector<int64_t> out;
  auto number = [&](const std::string& s) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || s.empty()) fail("{} {}: '{}' is not a number", flag, fmt::join(items, ","), s);
    if (v < min_value) fail("{}: {} is below the minimum {}", flag, v, min_value);
    return v;
  };
  for (const auto& item : items) {
    std::string s = item;
    const auto dash = s.find('-', 1);
    if (dash == std::string::npos) {
      out.push_back(number(s));
      continue;
    }
    const auto plus = s.find('+', dash);
    const int64_t first = number(s.substr(0, dash));
    const int64_t last = number(s.substr(dash + 1, plus == std::string::npos ? std::string::npos : plus - dash - 1));
    const int64_t step = plus == std::string::npos ? 1 : number(s.substr(plus + 1));
    if (step < 1 || last < first) fail("{} {}: a range is first-last[+step] with first <= last, step >= 1", flag, s);
    if ((last - first) / step > 4096) fail("{} {}: the range has too many values", flag, s);
    for (int64_t v = first; v <= last; v += step) out.push_back(v);
  }
  return out;
}

// --device-stats: each device's counters over a row's timed runs, per pass (a decoded token or a prompt ubatch).
void print_device_stats(const BenchResult& r, const Registry& reg, const std::vector<DeviceStats>& before,
                        int repetitions) {
  const int64_t passes =
      ((r.n_prompt + r.n_ubatch - 1) / std::max<int64_t>(1, r.n_ubatch) + r.n_gen) * std::max(1, repetitions);
  for (size_t i = 0; i < reg.devices().size(); ++i) {
    const DeviceStats after = reg.devices()[i]->stats();
    std::string line;
    for (const auto& v : after.values)
      line +=
          fmt::format(" {}={:.1f}", v.name, (v.value - before[i].get(v.name)) / double(std::max<int64_t>(1, passes)));
    std::fprintf(stderr, "opal bench: %s t%d %s per pass:%s\n", r.test_name().c_str(), r.n_threads,
                 reg.devices()[i]->name().c_str(), line.c_str());
  }
}

// llama.cpp's name of the file type (llama_model_ftype_name).
std::string ftype_label(const gguf::File& f) {
  if (const char* name = quant::file_type_display_name(f.get_int("general.file_type", -1))) return name;
  // No (known) file type: name the most common weight type by bytes.
  std::map<DType, uint64_t> bytes;
  for (const auto& t : f.tensors()) bytes[t.type] += t.nbytes;
  DType best = DType::F32;
  uint64_t most = 0;
  for (const auto& [ty, b] : bytes)
    if (b > most) most = b, best = ty;
  std::string n = dtype_name(best);
  for (auto& ch : n) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return n;
}

std::string size_label(const gguf::File& f, uint64_t n_params) {
  std::string s = f.get_string("general.size_label", "");
  if (!s.empty()) return s;
  if (n_params >= 1000000000ull) return fmt::format("{:.1f}B", double(n_params) / 1e9);
  if (n_params >= 1000000ull) return fmt::format("{}M", (n_params + 500000) / 1000000);
  return fmt::format("{}K", (n_params + 500) / 1000);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

using Clock = std::chrono::steady_clock;

// The same at positions from `depth` on (after a depth fill), in n_batch chunks, logits for the last token.
void run_prompt_at(Context& ctx, const std::vector<int32_t>& tokens, int64_t n_batch, int64_t depth) {
  PromptOptions po;
  po.n_batch = n_batch;
  po.pos0 = int32_t(depth);
  decode_prompt(ctx, tokens, po);
}

void run_gen(Context& ctx, int64_t n_past, int64_t n_gen, std::mt19937& rng, int32_t n_vocab) {
  Batch b;
  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
  for (int64_t i = 0; i < n_gen; ++i) {
    b.clear();
    b.add(pick(rng), int32_t(n_past + i), 0, true);
    ctx.decode(b);
  }
}

// The depth of a test (-d): filled once per (context, depth) and shared by every test of that depth. A test's
// run starts from the filled state: its own cells removed (seq_rm: the fill's cells are never written again), or,
// with a sliding-window cache (whose window slid past the fill's last cells) the state saved after the fill
// restored; a recurrent state goes back to its checkpoint after the fill. The fill's progress goes to stderr.
class DepthFill {
 public:
  DepthFill(Context& ctx, int64_t depth) : ctx_(ctx), depth_(depth) {}

  void fill(const std::vector<int32_t>& tokens, int64_t n_batch, bool show) {
    const auto t0 = Clock::now();
    const bool tty = isatty(STDERR_FILENO);
    PromptOptions po;
    po.n_batch = n_batch;
    if (show)
      po.on_chunk = [&](size_t, size_t end) {
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        std::fprintf(stderr, "%sopal bench: filling the cache to depth %lld: %zu tokens, %.1f s%s", tty ? "\r" : "",
                     (long long)depth_, end, s, tty && end < tokens.size() ? "" : "\n");
        std::fflush(stderr);
      };
    decode_prompt(ctx_, tokens, po);
    if (!ctx_.recurrent() && ctx_.swa_kv_cache()) saved_ = ctx_.save_cache();
  }

  void back_to_depth() {
    if (depth_ == 0) return ctx_.reset();
    if (saved_) return ctx_.restore_cache(*saved_);
    ctx_.seq_rm(0, int32_t(depth_), -1);
  }

 private:
  Context& ctx_;
  int64_t depth_;
  std::optional<Context::CacheState> saved_;
};

struct TestSpec {
  int64_t n_prompt = 0, n_gen = 0;
};

int run_bench(const BenchOptions& o) {
  // Validate everything before loading anything.
  if (o.models.empty()) fail("no model: pass -m FILE[,FILE...]");
  if (o.output != "md" && o.output != "csv" && o.output != "json" && o.output != "jsonl")
    fail("-o {}: expected md, csv, json or jsonl", o.output);
  if (o.repetitions < 1 || o.repetitions > 1000) fail("-r {}: expected 1 to 1000 repetitions", o.repetitions);
  if (o.idle_seconds < 0 || o.idle_seconds > 3600) fail("--idle {}: expected 0 to 3600 seconds", o.idle_seconds);
  // (K, V) cache type pairs: the product of the lists, or each K type with itself without --ctv.
  std::vector<std::pair<DType, DType>> kv_types;
  if (o.type_k.empty()) fail("-ctk: expected one or more cache types");
  for (const auto& tk : o.type_k) {
    const DType k = parse_cache_type(tk, "-ctk");
    if (o.type_v.empty()) kv_types.emplace_back(k, k);
    for (const auto& tv : o.type_v) kv_types.emplace_back(k, parse_cache_type(tv, "-ctv"));
  }
  const auto depths = parse_int_list(o.depths, "-d", 0);
  std::vector<int> flashes;
  for (const auto& f : o.flash) {
    const FlashAttn fa = parse_flash_attn(f);
    if (fa == FlashAttn::Auto) fail("-fa {}: bench takes 0 or 1 (a list), as llama-bench", f);
    flashes.push_back(fa == FlashAttn::On ? 1 : 0);
  }
  for (const auto& [tk, tv] : kv_types) {  // a quantized K also runs without flash attention, as in llama.cpp
    if (dtype_traits(tv).quantized && std::find(flashes.begin(), flashes.end(), 0) != flashes.end())
      fail("-ctv {} needs flash attention: pass -fa 1 (llama.cpp's rule)", dtype_name(tv));
  }
  const auto prompts = parse_int_list(o.n_prompt, "-p", 0);
  const auto gens = parse_int_list(o.n_gen, "-n", 0);
  const auto batches = parse_int_list(o.n_batch, "-b", 1);
  const auto ubatches = parse_int_list(o.n_ubatch, "--ub", 1);
  std::vector<int64_t> threads;
  if (o.threads.empty()) threads.push_back(int64_t(std::max(1u, std::thread::hardware_concurrency())));
  else threads = parse_int_list(o.threads, "-t", 1);
  for (int64_t t : threads)
    if (t > 1024) fail("-t {}: too many threads", t);
  std::vector<TestSpec> tests;
  for (int64_t p : prompts)
    if (p > 0) tests.push_back({p, 0});
  for (int64_t n : gens)
    if (n > 0) tests.push_back({0, n});
  for (const auto& s : o.pg) {
    const auto comma = s.find(',');
    if (comma == std::string::npos) fail("--pg {}: expected PROMPT,GEN (e.g. 512,128)", s);
    const auto v = parse_int_list({s.substr(0, comma), s.substr(comma + 1)}, "--pg", 1);
    tests.push_back({v[0], v[1]});
  }
  if (tests.empty()) fail("no tests: -p, -n and --pg are all zero or empty");
  for (const auto& t : tests)
    for (int64_t d : depths)
      if (d + t.n_prompt + t.n_gen > (1 << 20)) fail("test pp{}+tg{} at depth {} is too long", t.n_prompt, t.n_gen, d);
  std::vector<LoadMode> modes;
  if (o.no_mmap) modes.push_back(LoadMode::Read);
  if (o.mlock) modes.push_back(LoadMode::Lock);
  for (const auto& m : o.load_modes) modes.push_back(load_mode_from_name(m));
  if (modes.empty()) modes.push_back(default_load_mode());

  BenchConditions cond = probe_conditions();
  if (!o.no_bw)
    for (int64_t t : threads) cond.bandwidth_gbps[int(t)] = measure_read_bandwidth(int(t));
  std::set<std::string> kernel_names;
  std::set<std::string> repacked;  // per model: what the load-time repack did (the isa line says it)

  // Perf-event sinks (--perf-log, --trace, --summary) plug in here: the
  // hooks are set on every timed context.
  PerfSession perf_session(o.perf);
  RunHooks* hooks = perf_session.hooks();

  std::vector<BenchResult> results;
  const size_t n_total = o.models.size() * modes.size() * batches.size() * ubatches.size() * threads.size() *
                         kv_types.size() * flashes.size() * depths.size() * tests.size();
  size_t n_done = 0;
  std::mt19937 rng(1234);
  for (const auto& path : o.models) {
    for (LoadMode mode : modes) {
      auto reg = o.backend.make_registry(int(threads.front()));
      LoadOptions lo;
      lo.load_mode = mode;
      lo.repack = !o.no_repack;
      const auto t_load = Clock::now();
      auto model = Model::load(path, *reg, lo);
      const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
      if (o.progress)
        std::fprintf(stderr, "opal bench: loaded %s (%s) in %.2f s\n", path.c_str(), load_mode_name(mode), load_s);
      repacked.insert(model->n_repacked() > 0 ? fmt::format("repacked {} weights, {:.0f} MiB", model->n_repacked(),
                                                            double(model->repacked_bytes()) / (1 << 20))
                                              : std::string("no weight repacked"));
      const gguf::File& g = model->gguf();
      // A decode step streams every weight once, except the tables it reads a row of per token: the
      // token embedding when a separate output matrix exists, and Gemma 4's per-layer embeddings.
      uint64_t size = 0, n_params = 0, embd_bytes = 0, row_table_bytes = 0;
      bool has_output = false;
      for (const auto& t : g.tensors()) {
        size += t.nbytes;
        n_params += uint64_t(t.n_elements());
        if (t.name == "token_embd.weight") embd_bytes = t.nbytes;
        if (t.name == "per_layer_token_embd.weight") row_table_bytes += t.nbytes;
        if (t.name == "output.weight") has_output = true;
        if (t.ne.size() >= 2) {
          const cpu::MatmulKernels* k = cpu::matmul_kernels(t.type);
          kernel_names.insert(fmt::format("{}={}", dtype_name(t.type), k ? k->name : "none"));
        }
      }
      const std::string filename = path.substr(path.find_last_of('/') + 1);
      const std::string type =
          fmt::format("{} {} {}", g.get_string("general.architecture", "?"), size_label(g, n_params), ftype_label(g));
      const int32_t n_vocab = int32_t(model->hparams().n_vocab);
      for (int64_t nb : batches)
        for (int64_t nub : ubatches)
          for (int64_t nt : threads) {
            reg->set_threads(int(nt));
            for (const auto& [kv_type, kv_type_v] : kv_types)
              for (int fa : flashes)
                for (int64_t depth : depths) {
                  // One context and one fill per depth, shared by the tests of that depth (DepthFill).
                  int64_t longest = 0;
                  for (const auto& test : tests) longest = std::max(longest, test.n_prompt + test.n_gen);
                  ContextParams cp;
                  cp.n_ctx = depth + longest;
                  cp.n_batch = nb;
                  cp.n_ubatch = std::min(nb, nub);
                  cp.kv_type = kv_type;
                  cp.kv_type_v = kv_type_v;
                  cp.flash_attn = fa ? FlashAttn::On : FlashAttn::Off;
                  cp.n_threads = int(nt);
                  Context ctx(*model, cp);
                  if (hooks) ctx.set_hooks(hooks);
                  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
                  DepthFill fill(ctx, depth);
                  if (depth > 0) {
                    std::vector<int32_t> tokens(static_cast<size_t>(depth), 0);
                    for (auto& tok : tokens) tok = pick(rng);
                    fill.fill(tokens, nb, o.progress || isatty(STDERR_FILENO));
                  }
                  for (const auto& test : tests) {
                    ++n_done;
                    if (o.progress) {
                      BenchResult named;
                      named.n_prompt = test.n_prompt;
                      named.n_gen = test.n_gen;
                      named.n_depth = depth;
                      std::fprintf(stderr, "opal bench: benchmark %zu/%zu: %s %s t=%lld fa=%d\n", n_done, n_total,
                                   filename.c_str(), named.test_name().c_str(), (long long)nt, fa);
                    }
                    std::vector<int32_t> prompt(size_t(test.n_prompt));
                    for (auto& tok : prompt) tok = pick(rng);
                    // Each run below starts from the filled depth (the test's own cells removed, or the saved
                    // state restored), as llama-bench's refill would leave it.
                    auto back_to_depth = [&] { fill.back_to_depth(); };
                    back_to_depth();
                    if (!o.no_warmup) {
                      if (test.n_prompt > 0) run_prompt_at(ctx, prompt, nb, depth);
                      if (test.n_gen > 0) {
                        back_to_depth();
                        run_gen(ctx, depth, 1, rng, n_vocab);
                      }
                    }
                    if (o.idle_seconds > 0) {
                      if (o.progress) std::fprintf(stderr, "opal bench: idle for %.0f s\n", o.idle_seconds);
                      std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_seconds));
                    }
                    BenchResult r;
                    r.model_filename = path;
                    r.model_type = type;
                    r.model_size = size;
                    r.model_n_params = n_params;
                    r.weight_bytes_per_token = (has_output ? size - embd_bytes : size) - row_table_bytes;
                    r.n_threads = int(nt);
                    r.n_batch = nb;
                    r.n_ubatch = cp.n_ubatch;
                    r.type_k = dtype_name(kv_type);
                    r.type_v = dtype_name(kv_type_v);
                    r.flash_attn = fa;
                    r.n_depth = depth;
                    r.load_mode = load_mode_name(mode);
                    r.load_seconds = load_s;
                    r.n_prompt = test.n_prompt;
                    r.n_gen = test.n_gen;
                    r.test_time = utc_now();
                    if (!o.backend.backends.empty()) r.backend = "CPU," + o.backend.backends;
                    // Device counters before the timed runs, for the predicting devices' share.
                    std::vector<DeviceStats> stats_before;
                    for (const Device* d : reg->devices()) stats_before.push_back(d->stats());
                    for (int rep = 0; rep < o.repetitions; ++rep) {
                      back_to_depth();
                      const auto t0 = Clock::now();
                      if (test.n_prompt > 0) run_prompt_at(ctx, prompt, nb, depth);
                      if (test.n_gen > 0) run_gen(ctx, depth + test.n_prompt, test.n_gen, rng, n_vocab);
                      r.samples_ns.push_back(
                          uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
                    }
                    if (o.device_stats) print_device_stats(r, *reg, stats_before, o.repetitions);
                    for (size_t i = 0; i < reg->devices().size(); ++i) {
                      const DeviceStats after = reg->devices()[i]->stats();
                      if (after.prediction.model.empty()) continue;
                      const DeviceStats& before = stats_before[i];
                      BenchResult::DevicePrediction p;
                      p.device = reg->devices()[i]->name();
                      p.model = after.prediction.model;
                      p.scope = after.prediction.scope;
                      p.nodes_label = after.prediction.nodes;
                      p.only_label = after.prediction.only;
                      p.predicted_s = (after.get("predicted_s") - before.get("predicted_s")) / o.repetitions;
                      p.roofline_s = (after.get("roofline_s") - before.get("roofline_s")) / o.repetitions;
                      p.nodes_run = int64_t(after.get("nodes_run") - before.get("nodes_run")) / o.repetitions;
                      r.predictions.push_back(std::move(p));
                    }
                    results.push_back(std::move(r));
                  }
                }
          }
    }
  }
  cond.load_after = read_loadavg();
  for (const auto& k : kernel_names) cond.kernels += (cond.kernels.empty() ? "" : " ") + k;
  cond.isa = cpu::isa_description();
  if (cpu::batch_order() == cpu::BatchOrder::lanes) cond.isa += ", batch order lanes";
  if (cpu::batch_order() == cpu::BatchOrder::llama) cond.isa += ", batch order llama";
  const cpu::Isa isa = cpu::selected_isa();
  if (isa == cpu::Isa::avx2 || isa == cpu::Isa::avx2_vnni || isa == cpu::Isa::avx512)
    cond.isa += cpu::decode_prefetch() ? ", decode prefetch" : ", no decode prefetch";
  if (o.no_repack) cond.isa += ", --no-repack";
  else
    for (const auto& r : repacked) cond.isa += ", " + r;

  std::string out;
  if (o.output == "md") out = format_markdown(results, cond, BenchDefaults{});
  if (o.output == "csv") out = format_csv(results, cond);
  if (o.output == "json") out = format_json(results, cond);
  if (o.output == "jsonl") out = format_jsonl(results, cond);
  std::fputs(out.c_str(), stdout);
  if (o.output == "md") std::fputs(format_device_predictions(results).c_str(), stdout);
  std::fflush(stdout);
  if (!o.plot.empty()) {
    std::ofstream f(o.plot, std::ios::binary);
    if (!f) fail("--plot {}: cannot create the file", o.plot);
    f << format_svg(results, cond);
    if (!f.flush()) fail("--plot {}: write failed", o.plot);
  }
  return perf_session.finish();
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand("bench", "Measure prompt and generation speed (llama-bench compatible)");
  sub->add_option("-m,--model", o->models, "GGUF model(s), comma-separated")->delimiter(',');
  auto by_name = std::make_shared<std::string>();  // -hf / -hff / -mu: one more model, fetched by name
  add_hub_options(sub, by_name.get());
  add_pre_action(sub, [o, by_name] {
    if (!by_name->empty()) o->models.push_back(*by_name);
  });
  add_backend_option(sub, o->backend);
  sub->add_option("-p,--n-prompt", o->n_prompt, "Prompt lengths (default 512)")->delimiter(',');
  sub->add_option("-n,--n-gen", o->n_gen, "Generation lengths (default 128)")->delimiter(',');
  sub->add_option("--pg", o->pg, "Prompt + generation test PROMPT,GEN (repeatable; llama.cpp's -pg)");
  sub->add_option("-r,--repetitions", o->repetitions, "Timed repetitions per test (default 5)");
  // The context flags of every subcommand (tools/context_options.h), as lists.
  sub->add_option("-t,--threads", o->threads, fmt::format("{}, a list (default: all cores)", context_help::kThreads))
      ->delimiter(',');
  sub->add_option("-b,--batch-size", o->n_batch, fmt::format("{}, a list (default 2048)", context_help::kBatch))
      ->delimiter(',');
  sub->add_option("--ub,--ubatch-size", o->n_ubatch,
                  fmt::format("{}, a list (default 512; llama.cpp: -ub)", context_help::kUbatch))
      ->delimiter(',');
  sub->add_option("--ctk,--cache-type-k", o->type_k,
                  fmt::format("{}, a list (default f16; llama.cpp: -ctk)", context_help::kCacheType))
      ->delimiter(',');
  sub->add_option("--ctv,--cache-type-v", o->type_v,
                  fmt::format("{}, a list (llama.cpp: -ctv)", context_help::kCacheTypeV))
      ->delimiter(',');
  sub->add_option("-d,--n-depth", o->depths,
                  "Depths: tokens in the KV cache before each test, a list (default 0; llama-bench's -d)")
      ->delimiter(',');
  sub->add_option("--fa,--flash-attn", o->flash,
                  "Flash attention 0 (materialized scores) or 1 (tiled, online softmax), a list (default 0; "
                  "llama-bench's -fa)")
      ->delimiter(',');
  sub->add_option("--lm,--load-mode", o->load_modes,
                  std::string("Load modes: mmap, populate, read (none), lock (mlock), huge (default: ") +
                      load_mode_name(default_load_mode()) + ")")
      ->delimiter(',');
  sub->add_flag("--no-mmap", o->no_mmap, "Read the weights into memory (load mode read)");
  sub->add_flag("--mlock", o->mlock, "Map, populate and lock the weights (load mode lock)");
  sub->add_flag("--no-repack,--nr", o->no_repack,
                "Keep the GGUF layout of every weight (no load-time repacking; the isa line says which ran)");
  sub->add_option("-o,--output", o->output, "Output format: md (default), csv, json, jsonl");
  sub->add_option("--plot", o->plot, "Also draw the results as an SVG bar chart into this file");
  sub->add_option(
      "--idle", o->idle_seconds,
      "Sleep this many seconds after the warm-up, before timing (reproduces the host paging idle memory out)");
  sub->add_flag("--no-warmup", o->no_warmup, "Skip the warm-up run");
  sub->add_flag("--no-bw", o->no_bw, "Do not measure the memory bandwidth (the % bw column shows -)");
  sub->add_flag("--progress", o->progress, "Print progress to stderr");
  sub->add_flag("--device-stats", o->device_stats,
                "Print each device's counters (CPU: pool jobs, run / busy / wait us per thread) per decode pass "
                "of each row to stderr");
  add_isa_option(sub);
  add_perf_options(sub, o->perf);
  set_action(sub, [o] { return run_bench(*o); });
}

}  // namespace opal::tools
