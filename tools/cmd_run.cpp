// `opal run -m MODEL -p PROMPT [-n N] [-c N] [-t N] [-b N] [-ub N] [--temp T]
//  [--top-k K] [--top-p P] [--min-p P] [--seed S]`: tokenizes the prompt,
// evaluates it in batches, then samples and streams tokens until -n tokens,
// an end-of-generation token or a full context; ends with a summary line
// (prompt and generation tokens per second) on stderr.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "graph/registry.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/context.h"
#include "sampling/sampler.h"
#include "tokenizer/vocab.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/isa_option.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"
#include "tools/default_model.h"

namespace opal::tools {
namespace {

struct RunOptions {
  LoadOptions load;  // --lm / --no-mmap / --mlock
  std::string model, prompt, file, kv = "f16";
  int n_predict = -1;
  int64_t n_ctx = 0, n_batch = 2048, n_ubatch = 512;
  int threads = 0;
  SamplerParams sampling;
  int64_t seed = -1;
  BackendOptions backend;
  PerfOptions perf;
};

using Clock = std::chrono::steady_clock;

int run_run(RunOptions o) {
  if (!o.file.empty()) {
    std::ifstream f(o.file, std::ios::binary);
    if (!f) fail("cannot read prompt file '{}'", o.file);
    std::stringstream ss;
    ss << f.rdbuf();
    o.prompt = ss.str();
  }
  if (o.kv != "f16" && o.kv != "f32" && o.kv != "bf16") fail("-ctk must be f16, bf16 or f32, got '{}'", o.kv);
  if (o.model.empty()) o.model = default_model_path();  // models/opal-kjv.gguf
  auto reg = o.backend.make_registry(o.threads);
  auto model = Model::load(o.model, *reg, o.load);
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  ContextParams cp;
  cp.n_ctx = o.n_ctx;
  cp.n_batch = o.n_batch;
  cp.n_ubatch = o.n_ubatch;
  cp.kv_type = *dtype_from_name(o.kv);
  Context ctx(*model, cp);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  o.sampling.seed = o.seed < 0 ? kRandomSeed : uint32_t(o.seed);
  Sampler sampler(o.sampling, int32_t(ctx.n_vocab()));

  const std::vector<int32_t> prompt = vocab.tokenize(o.prompt, true, true);
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) >= ctx.n_ctx())
    fail("the prompt has {} tokens but the context holds only n_ctx = {} (raise -c)", prompt.size(), ctx.n_ctx());

  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  const auto t0 = Clock::now();
  Batch b;
  for (size_t s = 0; s < prompt.size(); s += size_t(cp.n_batch)) {
    b.clear();
    const size_t e = std::min(prompt.size(), s + size_t(cp.n_batch));
    for (size_t i = s; i < e; ++i) b.add(prompt[i], int32_t(i), 0, i + 1 == prompt.size());
    ctx.decode(b);
  }
  for (int32_t t : prompt) sampler.accept(t);
  const auto t1 = Clock::now();

  int n_gen = 0;
  int64_t n_past = int64_t(prompt.size());
  std::string stop = "limit";
  while (o.n_predict < 0 || n_gen < o.n_predict) {
    const int32_t tok = sampler.sample(ctx.logits(ctx.n_outputs() - 1));
    sampler.accept(tok);
    if (vocab.is_eog(tok)) {
      stop = "end of generation";
      break;
    }
    const std::string piece = vocab.token_to_piece(tok, false);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    ++n_gen;
    if (n_past >= ctx.n_ctx()) {
      stop = "context full";
      break;
    }
    if (o.n_predict >= 0 && n_gen >= o.n_predict) break;
    b.clear();
    b.add(tok, int32_t(n_past++), 0, true);
    ctx.decode(b);
  }
  const auto t2 = Clock::now();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double pp_s = std::chrono::duration<double>(t1 - t0).count();
  const double tg_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "\nprompt: %zu tokens in %.3f s (%.2f t/s) | generation: %d tokens in %.3f s (%.2f t/s) | stop: %s\n",
               prompt.size(), pp_s, pp_s > 0 ? double(prompt.size()) / pp_s : 0.0, n_gen, tg_s,
               tg_s > 0 ? n_gen / tg_s : 0.0, stop.c_str());
  return perf.finish();
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt");
  sub->add_option("-m,--model", o->model, "GGUF model (default: models/opal-kjv.gguf, or $OPAL_DEFAULT_MODEL)");
  add_load_options(sub, &o->load);
  sub->add_option("-p,--prompt", o->prompt, "prompt text");
  sub->add_option("-f,--file", o->file, "read the prompt from a file");
  sub->add_option("-n,--predict,--n-predict", o->n_predict, "tokens to generate (-1 = until end of generation)");
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (0 = the model's)");
  sub->add_option("-t,--threads", o->threads, "threads (default: all)");
  add_isa_option(sub);
  sub->add_option("-b,--batch-size", o->n_batch, "logical batch size (2048)");
  sub->add_option("--ub,--ubatch-size", o->n_ubatch, "physical batch size (512; llama.cpp spells it -ub, which CLI11 cannot parse)");
  sub->add_option("--ctk,--cache-type-k", o->kv, "KV cache type: f16 (default), bf16, f32");
  sub->add_option("--temp", o->sampling.temp, "temperature (0.8; <= 0 greedy)");
  sub->add_option("--top-k", o->sampling.top_k, "top-k (40; 0 off)");
  sub->add_option("--top-p", o->sampling.top_p, "top-p (0.95; 1 off)");
  sub->add_option("--min-p", o->sampling.min_p, "min-p (0.05; 0 off)");
  sub->add_option("-s,--seed", o->seed, "RNG seed (-1 = random)");
  add_backend_option(sub, o->backend);
  add_perf_options(sub, o->perf);
  set_action(sub, [o] { return run_run(*o); });
}

}  // namespace opal::tools
