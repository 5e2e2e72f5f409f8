// `opal run -m MODEL -p PROMPT [-n N] [-c N] [-t N] [-b N] [-ub N] [--temp T]
//  [--top-k K] [--top-p P] [--min-p P] [--seed S] [-md DRAFT | --spec-type ngram-simple]`: tokenizes the prompt,
// evaluates it in batches, then samples and streams tokens until -n tokens,
// an end-of-generation token or a full context (runtime/generation.h), with
// speculative decoding when asked (tools/spec_options.h); ends with a summary
// line (prompt and generation tokens per second, drafts accepted) on stderr.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/generation.h"
#include "tokenizer/vocab.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/default_model.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"
#include "tools/sampling_options.h"
#include "tools/spec_options.h"

namespace opal::tools {
namespace {

struct RunOptions {
  LoadOptions load;  // --lm / --no-mmap / --mlock
  std::string model, prompt, file;
  int n_predict = -1;
  ContextOptions context;    // -c -b --ub --ctk -t
  SamplingOptions sampling;  // --temp --top-k ... --seed
  BackendOptions backend;
  PerfOptions perf;
  SpecOptions spec;  // -md --spec-type --draft-max ...
};

using Clock = std::chrono::steady_clock;

// The summary line's names of the finish reasons.
const char* stop_label(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "end of generation";
    case FinishReason::ContextFull: return "context full";
    case FinishReason::Length:
    case FinishReason::Requested: break;
  }
  return "limit";
}

int run_run(RunOptions o) {
  if (!o.file.empty()) {
    std::ifstream f(o.file, std::ios::binary);
    if (!f) fail("cannot read prompt file '{}'", o.file);
    std::stringstream ss;
    ss << f.rdbuf();
    o.prompt = ss.str();
  }
  ContextParams cp = o.context.params();  // checks -ctk before loading
  fit_context_for_speculation(cp, o.spec.resolved());
  check_n_predict(o.n_predict);
  if (o.model.empty()) o.model = default_model_path();  // models/opal-kjv.gguf
  const int threads = o.context.thread_count();
  auto reg = o.backend.make_registry(threads);
  auto model = Model::load(o.model, *reg, o.load);
  warn_context_size(cp.n_ctx, model->hparams(), "run");
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  Context ctx(*model, cp);
  if (ctx.recurrent()) std::fprintf(stderr, "opal: KV cache %.2f MiB\n", double(ctx.kv_bytes()) / 1048576.0);
  else std::fprintf(stderr, "opal: %s\n", ctx.kv_summary().c_str());
  const Draft draft = make_draft(o.spec, *reg, o.backend, threads, o.load, vocab, ctx);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  Sampler sampler(o.sampling.params(vocab), int32_t(ctx.n_vocab()));

  const std::vector<int32_t> prompt = vocab.tokenize(o.prompt, true, true);
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) >= ctx.n_ctx())
    fail("the prompt has {} tokens but the context holds only n_ctx = {} (raise -c)", prompt.size(), ctx.n_ctx());

  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  const auto t0 = Clock::now();
  Sequence seq(ctx);
  seq.decode(prompt);
  for (int32_t t : prompt) sampler.accept(t);
  const auto t1 = Clock::now();

  StopRules rules;
  rules.n_predict = o.n_predict;
  const GenerateResult g = generate(
      seq, sampler, vocab, rules,
      [](int32_t, std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      },
      draft.spec.get());
  const auto t2 = Clock::now();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double pp_s = std::chrono::duration<double>(t1 - t0).count();
  const double tg_s = std::chrono::duration<double>(t2 - t1).count();
  const int n_gen = int(g.n_generated);
  std::fprintf(stderr,
               "\nprompt: %zu tokens in %.3f s (%.2f t/s) | generation: %d tokens in %.3f s (%.2f t/s) | stop: %s\n",
               prompt.size(), pp_s, pp_s > 0 ? double(prompt.size()) / pp_s : 0.0, n_gen, tg_s,
               tg_s > 0 ? n_gen / tg_s : 0.0, stop_label(g.reason));
  if (draft.spec) std::fprintf(stderr, "speculative: %s\n", spec_summary(*draft.spec).c_str());
  finish_draft(draft);
  return perf.finish();
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt");
  add_model_options(sub, &o->model, &o->load, ModelDefault::BuiltIn);
  sub->add_option("-p,--prompt", o->prompt, "prompt text");
  sub->add_option("-f,--file", o->file, "read the prompt from a file");
  sub->add_option("-n,--predict,--n-predict", o->n_predict, "tokens to generate (-1 = until end of generation)");
  add_engine_options(sub, o->context, o->backend, o->perf);
  add_sampling_options(sub, o->sampling);
  add_spec_options(sub, o->spec);
  set_action(sub, [o] { return run_run(*o); });
}

}  // namespace opal::tools
