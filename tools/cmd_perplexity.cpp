// `opal perplexity -m MODEL -f FILE -c N [-b N] [-t N]`: perplexity of a text
// with llama.cpp's method (runtime/perplexity.h); prints a progress bar, the
// running estimate per chunk as llama-perplexity does ("[1]5.0090,[2]...")
// and the final estimate.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/perplexity.h"
#include "tokenizer/vocab.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"

namespace opal::tools {
namespace {

struct PerplexityOptions {
  LoadOptions load;  // --lm / --no-mmap / --mlock
  std::string model, file;
  ContextOptions context{.n_ctx = 512};  // -c is the chunk size; -b at most -c
  BackendOptions backend;
  PerfOptions perf;
};

int run_perplexity(const PerplexityOptions& o) {
  std::ifstream f(o.file, std::ios::binary);
  if (!f) fail("cannot read '{}'", o.file);
  std::stringstream ss;
  ss << f.rdbuf();
  const int64_t n_ctx = o.context.n_ctx;
  if (n_ctx < 4) fail("-c must be at least 4, got {}", n_ctx);
  ContextParams cp = o.context.params();  // checks -ctk before loading
  cp.n_batch = cp.n_ubatch = std::min(o.context.n_batch, n_ctx);
  auto reg = o.backend.make_registry(o.context.thread_count());
  auto model = Model::load(o.model, *reg, o.load);
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  const std::vector<int32_t> tokens = vocab.tokenize(ss.str(), true, false);
  Context ctx(*model, cp);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld\n", tokens.size(),
               static_cast<long long>(tokens.size() / size_t(n_ctx)), static_cast<long long>(n_ctx));
  std::string line;
  auto progress = [&](int64_t done, int64_t total, double ppl) {
    const int width = 30;
    const int filled = int(width * done / total);
    std::fprintf(stderr, "\r[%s%s] %lld/%lld chunks", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), ' ').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total));
    std::fflush(stderr);
    line += fmt::format("[{}]{:.4f},", done, ppl);
  };
  const PerplexityResult r =
      compute_perplexity(ctx, tokens, n_ctx, cp.n_batch, vocab.add_bos() ? vocab.bos() : -1, progress);
  std::fprintf(stderr, "\n");
  if (!line.empty()) line.pop_back();
  std::printf("%s\n", line.c_str());
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.uncertainty);
  return perf.finish();
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* sub = app.add_subcommand("perplexity", "Perplexity of a text file (llama.cpp's method)");
  add_model_options(sub, &o->model, &o->load, ModelDefault::Required);
  sub->add_option("-f,--file", o->file, "text file")->required();
  // -c is also the chunk size; -b is capped at -c and is also the ubatch size.
  add_engine_options(sub, o->context, o->backend, o->perf, kCtxSizeFlag | kBatchFlag | kCacheTypeFlag | kThreadsFlag);
  CLI::Option* ctx_size = sub->get_option("--ctx-size");
  ctx_size->description(ctx_size->get_description() + "; also the chunk size");
  set_action(sub, [o] { return run_perplexity(*o); });
}

}  // namespace opal::tools
