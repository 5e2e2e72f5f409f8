// `opal quantize IN OUT TYPE [-t N] [--allow-requantize] [--pure]
//                [--output-tensor-type T] [--token-embedding-type T]`
// Writes a GGUF file whose tensors are converted to the file type TYPE
// (llama-quantize's names or LLAMA_FTYPE numbers), choosing each tensor's type
// with llama.cpp's rules (core/quant/recipe.h, docs/quantize.md) and the
// reference quantizers (core/quant.h). Metadata is copied; general.file_type
// and general.quantization_version (2) are set. Tensors are written in
// llama.cpp's order. Rows are quantized on -t threads; the quantized tensors
// are held in memory until the file is written.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "core/quant/recipe.h"
#include "tools/commands.h"

namespace opal::tools {
namespace {

struct QuantizeOptions {
  std::string input, output, type;
  int threads = 0;
  bool allow_requantize = false;
  bool pure = false;
  std::string output_tensor_type, token_embedding_type;
};

std::string file_type_names() {
  std::string s;
  for (const auto& f : quant::file_types()) s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", f.name, int(f.ftype));
  return s;
}

DType parse_tensor_type(const std::string& s, const char* flag) {
  auto t = dtype_from_name(s);
  if (!t || !can_quantize(*t)) {
    std::string names;
    for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                    DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL})
      names += fmt::format("{}{}", names.empty() ? "" : ", ", dtype_name(d));
    fail("{} {}: not a tensor type Opal can write (one of: {})", flag, s, names);
  }
  return *t;
}

// Fails early (before any work) if OUT cannot be created.
void check_writable(const std::string& out) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(out).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("cannot write {}: folder {} does not exist", out, dir.string());
  if (access(dir.c_str(), W_OK) != 0) fail("cannot write {}: folder {} is not writable", out, dir.string());
  if (fs::is_directory(out, ec)) fail("cannot write {}: it is a folder", out);
}

// Converts src (n_rows x n_per_row f32) to type on up to n_threads threads, splitting on row boundaries.
void quantize_threaded(DType type, const float* src, uint8_t* dst, int64_t n_rows, int64_t n_per_row, int n_threads) {
  const int64_t min_rows_per_thread = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_per_row));
  const int64_t n_chunks = std::clamp<int64_t>(n_rows / min_rows_per_thread, 1, n_threads);
  const size_t row_size = row_bytes(type, n_per_row);
  std::vector<std::thread> workers;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t r0 = n_rows * c / n_chunks, r1 = n_rows * (c + 1) / n_chunks;
    auto work = [&, r0, r1] {
      try {
        quantize_rows(type, src + r0 * n_per_row, dst + size_t(r0) * row_size, r1 - r0, n_per_row);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    };
    if (c + 1 == n_chunks) work();
    else workers.emplace_back(work);
  }
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

int run_quantize(const QuantizeOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  auto ftype = quant::parse_file_type(o.type);
  if (!ftype) fail("unknown quantization type '{}'; use one of: {}", o.type, file_type_names());
  quant::RecipeOptions recipe;
  recipe.ftype = *ftype;
  recipe.pure = o.pure;
  if (!o.output_tensor_type.empty())
    recipe.output_type = parse_tensor_type(o.output_tensor_type, "--output-tensor-type");
  if (!o.token_embedding_type.empty())
    recipe.token_embd_type = parse_tensor_type(o.token_embedding_type, "--token-embedding-type");
  const int n_threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  gguf::File in = gguf::File::open(o.input);
  if (std::filesystem::exists(o.output) && std::filesystem::equivalent(o.input, o.output))
    fail("output {} is the input file; write to another path", o.output);
  check_writable(o.output);

  // Tensors in llama.cpp's order, and their new types.
  std::vector<const gguf::TensorInfo*> order;
  for (const auto& t : in.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return quant::tensor_order_less(a->name, b->name); });
  std::vector<quant::TensorDesc> descs;
  for (const auto* t : order) descs.push_back({t->name, t->ne, t->type});
  std::vector<std::string> notes;
  const auto types = quant::choose_tensor_types(quant::ModelShape::from_gguf(in), descs, recipe, &notes);
  for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());

  // Refuse before doing any work.
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    if (types[i] == t.type) continue;
    if (dtype_traits(t.type).quantized && !o.allow_requantize)
      fail("{}: tensor {} is already quantized ({}); pass --allow-requantize to quantize it again (quality drops)",
           o.input, t.name, dtype_name(t.type));
    if (!can_dequantize(t.type))
      fail("{}: tensor {} has type {}, which Opal cannot convert", o.input, t.name, dtype_name(t.type));
    if (!can_quantize(types[i])) fail("tensor {}: Opal cannot write type {}", t.name, dtype_name(types[i]));
  }

  gguf::Writer writer(3);  // as llama-quantize, whatever the input's version
  writer.copy_metadata(in);
  for (const char* k :
       {"general.quantization_version", "general.file_type", "split.no", "split.count", "split.tensors.count"})
    writer.remove(k);
  writer.set("general.quantization_version", gguf::Value::from_u32(2));
  writer.set("general.file_type", gguf::Value::from_u32(uint32_t(*ftype)));

  const bool tty = isatty(2);
  std::deque<std::vector<uint8_t>> buffers;  // quantized tensors, alive until write()
  std::vector<float> f32;
  uint64_t bytes_in = 0, bytes_out = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    const DType type = types[i];
    const auto t0 = Clock::now();
    if (type == t.type) {
      writer.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
      bytes_out += t.nbytes;
    } else {
      const int64_t n = t.n_elements();
      const float* src = reinterpret_cast<const float*>(t.data);
      if (t.type != DType::F32 || reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
        f32.resize(size_t(n));
        dequantize_row(t.type, t.data, f32.data(), n);
        src = f32.data();
      }
      const int64_t n_per_row = t.ne.empty() ? 1 : t.ne[0];
      const int64_t n_rows = n_per_row ? n / n_per_row : 0;
      auto& buf = buffers.emplace_back(size_t(n_rows) * row_bytes(type, n_per_row));
      quantize_threaded(type, src, buf.data(), n_rows, n_per_row, n_threads);
      writer.add_tensor(t.name, type, t.ne, buf.data(), buf.size());
      bytes_out += buf.size();
    }
    bytes_in += t.nbytes;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double mbps = secs > 0 ? double(t.nbytes) / 1e6 / secs : 0.0;
    std::fprintf(stderr, "%s[%4zu/%4zu] %-40s %6s -> %-6s %9.1f MB/s%s", tty ? "\r" : "", i + 1, order.size(),
                 t.name.c_str(), dtype_name(t.type), dtype_name(type), mbps, tty ? "\033[K" : "\n");
  }
  if (tty) std::fprintf(stderr, "\n");
  writer.write(o.output);
  const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::fprintf(stderr, "%s: %s, %.2f MiB -> %.2f MiB, %zu tensors, %.2f s on %d threads\n", o.output.c_str(),
               quant::file_type_info(*ftype).name, double(bytes_in) / 1048576.0, double(bytes_out) / 1048576.0,
               order.size(), secs, n_threads);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub =
      app.add_subcommand("quantize", "Convert a GGUF model's weights to a quantized type (as llama-quantize)");
  sub->add_option("input", o->input, "Input GGUF file")->required();
  sub->add_option("output", o->output, "Output GGUF file")->required();
  sub->add_option("type", o->type, "Target: " + file_type_names() + "; also Q3_K, Q4_K, Q5_K (= _M)")->required();
  sub->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--allow-requantize", o->allow_requantize, "Allow converting tensors that are already quantized");
  sub->add_flag("--pure", o->pure, "Use the default type for every quantized tensor (no k-quant mixture)");
  sub->add_option("--output-tensor-type", o->output_tensor_type, "Type for output.weight (e.g. q8_0)");
  sub->add_option("--token-embedding-type", o->token_embedding_type, "Type for token_embd.weight (e.g. q8_0)");
  set_action(sub, [o] { return run_quantize(*o); });
}

}  // namespace opal::tools
