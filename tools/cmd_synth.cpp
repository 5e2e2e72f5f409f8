// `opal synth --preset smollm2-135m|qwen3-0.6b|llama32-1b [--type f16|q8_0|q4_0|q4_k_m]
//             -o FILE [--seed S] [-t N] [--dry-run]`
// Writes a random-weight GGUF model at a real model's shapes (tools/synth_model.h).
// The file is streamed: weights are generated and quantized a few MiB at a
// time on -t threads while being written, so even the 1B preset needs little
// memory. Hidden developer overrides --layers N and --vocab N make small
// files of the same layer shapes (tests).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "tools/commands.h"
#include "tools/synth_model.h"

namespace opal::tools {
namespace {

struct SynthOptions {
  std::string preset, type = "q4_0", output;
  uint64_t seed = 42;
  int threads = 0;
  int64_t layers = 0, vocab = 0;
  bool dry_run = false;
};

// Fills rows [r0, r1) of tensor t on n_threads threads.
void fill_rows(const SynthTensor& t, uint64_t tensor_index, uint64_t seed, int64_t r0, int64_t r1, uint8_t* dst,
               int n_threads, const std::vector<float>& rope_factors) {
  const int64_t ne0 = t.ne[0];
  const uint64_t row_size = row_bytes(t.type, ne0);
  auto work = [&](int64_t a, int64_t b) {
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = a; r < b; ++r) {
      switch (t.init) {
        case SynthTensor::Init::Random: synth_random_row(seed, tensor_index, r, row.data(), ne0); break;
        case SynthTensor::Init::Ones: std::fill(row.begin(), row.end(), 1.0f); break;
        case SynthTensor::Init::RopeFreqs: std::copy(rope_factors.begin(), rope_factors.end(), row.begin()); break;
      }
      uint8_t* out = dst + uint64_t(r - r0) * row_size;
      if (t.type == DType::F32) std::memcpy(out, row.data(), row_size);
      else quantize_rows(t.type, row.data(), out, 1, ne0);
    }
  };
  const int64_t n = r1 - r0;
  const int n_workers = int(std::clamp<int64_t>(n / 4, 1, n_threads));
  if (n_workers == 1) return work(r0, r1);
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int i = 1; i < n_workers; ++i)
    threads.emplace_back([&, i] {
      try {
        work(r0 + n * i / n_workers, r0 + n * (i + 1) / n_workers);
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  try {
    work(r0, r0 + n / n_workers);
  } catch (...) {
    std::lock_guard<std::mutex> lk(error_mutex);
    if (!error) error = std::current_exception();
  }
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
}

int run_synth(const SynthOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  SynthPreset p = find_synth_preset(o.preset);
  const quant::FileType ftype = synth_file_type(o.type);
  if (o.layers < 0 || o.layers > 1024) fail("--layers {}: expected 1 to 1024", o.layers);
  if (o.layers > 0) {
    p.n_layer = o.layers;
    // A cut-down Gemma 4 keeps its first period of layers with their own K/V and shares the rest (as many as
    // the preset shares at most), so that a shared layer of either kind has a source.
    p.shared_kv_layers = std::clamp<int64_t>(o.layers - p.swa_period, 0, p.shared_kv_layers);
  }
  if (o.vocab != 0) {
    if (o.vocab < 258 || o.vocab > (1 << 20)) fail("--vocab {}: expected 258 to {}", o.vocab, 1 << 20);
    p.n_vocab = o.vocab;
  }
  if (!o.dry_run && o.output.empty()) fail("no output file: pass -o FILE");
  const int n_threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  const auto tensors = synth_tensors(p, ftype);
  uint64_t total_bytes = 0, n_params = 0;
  for (const auto& t : tensors) total_bytes += t.bytes(), n_params += uint64_t(t.n_elements());
  if (o.layers > 0 || o.vocab != 0)  // not the real model any more: label it by its own size
    p.size_label = n_params >= 1000000 ? fmt::format("{}M", (n_params + 500000) / 1000000)
                                       : fmt::format("{}K", (n_params + 500) / 1000);
  if (o.dry_run) {
    for (const auto& t : tensors) {
      std::string shape;
      for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      std::printf("%-28s %-6s [%s] %llu bytes\n", t.name.c_str(), dtype_name(t.type), shape.c_str(),
                  (unsigned long long)t.bytes());
    }
    std::printf("preset: %s\ntype: %s\ntensors: %zu\nparams: %llu\ntensor bytes: %llu\n", p.name.c_str(),
                quant::file_type_info(ftype).name, tensors.size(), (unsigned long long)n_params,
                (unsigned long long)total_bytes);
    return 0;
  }
  {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(o.output).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("cannot write {}: folder {} does not exist", o.output, dir.string());
    if (fs::is_directory(o.output, ec)) fail("cannot write {}: it is a folder", o.output);
  }

  gguf::Writer w(3);
  add_synth_metadata(w, p, ftype);
  const auto rope_factors = synth_rope_factors(p);
  const bool tty = isatty(2);
  uint64_t written = 0;
  std::mutex progress_mutex;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SynthTensor& t = tensors[i];
    w.add_tensor_rows(t.name, t.type, t.ne, [&, i](int64_t r0, int64_t r1, uint8_t* dst) {
      fill_rows(t, i, o.seed, r0, r1, dst, n_threads, rope_factors);
      written += uint64_t(r1 - r0) * row_bytes(t.type, t.ne[0]);
      const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
      std::fprintf(stderr, "%s[%4zu/%4zu] %-28s %-6s %8.1f / %.1f MiB  %6.1f MiB/s%s", tty ? "\r" : "", i + 1,
                   tensors.size(), t.name.c_str(), dtype_name(t.type), double(written) / 1048576.0,
                   double(total_bytes) / 1048576.0, secs > 0 ? double(written) / 1048576.0 / secs : 0.0,
                   tty ? "\033[K" : "\n");
    });
  }
  w.write(o.output);
  if (tty) std::fprintf(stderr, "\n");
  const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::fprintf(stderr, "%s: %s %s, %llu params, %.2f MiB of tensors, seed %llu, %.1f s on %d threads\n",
               o.output.c_str(), p.name.c_str(), quant::file_type_info(ftype).name, (unsigned long long)n_params,
               double(total_bytes) / 1048576.0, (unsigned long long)o.seed, secs, n_threads);
  return 0;
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  std::string presets;
  for (const auto& p : synth_presets()) presets += (presets.empty() ? "" : ", ") + p.name;
  CLI::App* sub =
      app.add_subcommand("synth", "Write a random-weight GGUF model at a real model's shapes (for benchmarks)");
  sub->add_option("--preset", o->preset, "Model shape: " + presets)->required();
  sub->add_option("--type", o->type, "Weight type: f16, q8_0, q4_0 (default), q4_k_m (llama.cpp's per-tensor mixture)");
  sub->add_option("-o,--output", o->output, "Output GGUF file");
  sub->add_option("-s,--seed", o->seed, "Seed of the weights (default 42)");
  sub->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--dry-run", o->dry_run, "Print the tensors, their types and sizes; write nothing");
  sub->add_option("--layers", o->layers, "Developer: number of layers instead of the preset's")->group("");
  sub->add_option("--vocab", o->vocab, "Developer: vocabulary size instead of the preset's")->group("");
  set_action(sub, [o] { return run_synth(*o); });
}

}  // namespace opal::tools
