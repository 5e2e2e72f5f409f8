// `opal bench-spec -m TARGET (-md DRAFT | --spec-type ngram-*) [-p TEXT | -f FILE] [-n 128] [-r 3]
//  [-t N] [--isa NAME] [--draft-max N] ...`: the speed of speculative decoding
// (docs/speculative.md). From the same prompt, greedy generation of -n tokens
// (end of generation ignored) runs -r times without and -r times with
// speculation, alternating, each from an empty cache after one untimed warm-up
// of each; the prompt is not timed. Prints one markdown row: generation t/s
// without and with (mean ± sd), the speedup, draft tokens proposed and
// accepted, and whether the two outputs are the same tokens (else the first
// token where they differ, a near-tie flipped by rounding; exit status 1).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "backends/cpu/kernels/isa.h"
#include "core/error.h"
#include "core/version.h"
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
#include "tools/spec_options.h"

namespace opal::tools {
namespace {

struct BenchSpecOptions {
  LoadOptions load;
  std::string model, prompt = "Once upon a time", file;
  int n_gen = 128, repetitions = 3;
  ContextOptions context;
  BackendOptions backend;
  PerfOptions perf;
  SpecOptions spec;
};

using Clock = std::chrono::steady_clock;

struct Stat {
  double mean = 0, sd = 0;
};
Stat stat(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x / double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0.0;
  return s;
}

int run_bench_spec(BenchSpecOptions o) {
  if (!o.file.empty()) {
    std::ifstream f(o.file, std::ios::binary);
    if (!f) fail("cannot read prompt file '{}'", o.file);
    std::stringstream ss;
    ss << f.rdbuf();
    o.prompt = ss.str();
  }
  if (o.n_gen < 1) fail("-n must be at least 1, got {}", o.n_gen);
  if (o.repetitions < 1) fail("-r must be at least 1, got {}", o.repetitions);
  ContextParams cp = o.context.params();
  fit_context_for_speculation(cp, o.spec.resolved());
  if (o.model.empty()) o.model = default_model_path();
  const int threads = o.context.thread_count();
  auto reg = o.backend.make_registry(threads);
  auto model = Model::load(o.model, *reg, o.load);
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  Context ctx(*model, cp);
  const Draft draft = make_draft(o.spec, *reg, o.backend, threads, o.load, vocab, ctx);
  if (!draft.spec)
    fail("bench-spec measures speculative decoding: give -md FILE or --spec-type ngram-simple (or another)");
  const std::vector<int32_t> prompt = vocab.tokenize(o.prompt, true, true);
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) + o.n_gen + 1 > ctx.n_ctx())
    fail("the prompt ({} tokens) and -n {} do not fit n_ctx = {} (raise -c)", prompt.size(), o.n_gen, ctx.n_ctx());

  // One generation from an empty cache: seconds of generation (the prompt not timed) and the tokens.
  auto once = [&](Speculation* spec, std::vector<int32_t>& out) {
    ctx.reset();
    if (draft.ctx) draft.ctx->reset();
    if (spec) spec->drafter().reset();
    Sequence seq(ctx);
    seq.decode(prompt);
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp, int32_t(ctx.n_vocab()));
    StopRules rules;
    rules.n_predict = o.n_gen;
    rules.ignore_eog = true;
    out.clear();
    const auto t0 = Clock::now();
    generate(
        seq, sampler, vocab, rules,
        [&](int32_t t, std::string_view) {
          out.push_back(t);
          return true;
        },
        spec);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<int32_t> plain_tokens, spec_tokens;
  once(nullptr, plain_tokens);  // warm-ups
  once(draft.spec.get(), spec_tokens);
  draft.spec->reset_stats();
  std::vector<double> plain_tps, spec_tps;
  size_t first_diff = SIZE_MAX;  // the first generated token where the outputs differ, over all runs
  for (int r = 0; r < o.repetitions; ++r) {
    plain_tps.push_back(double(o.n_gen) / once(nullptr, plain_tokens));
    spec_tps.push_back(double(o.n_gen) / once(draft.spec.get(), spec_tokens));
    if (plain_tokens != spec_tokens) first_diff = std::min(first_diff, common_prefix(plain_tokens, spec_tokens));
  }
  const bool same = first_diff == SIZE_MAX;
  // A difference comes from the rounding of a batch against single tokens at a near-tie of the top two logits
  // (docs/speculative.md); the row says where, for `opal logits --greedy` to show the gap.
  const std::string same_text = same ? std::string("yes") : fmt::format("no: from token {}", first_diff);
  const Stat a = stat(plain_tps), b = stat(spec_tps);
  const SpecStats& st = draft.spec->stats();
  const SpecParams& p = draft.spec->params();
  const std::string how = p.type == SpecType::Draft ? fmt::format("draft {} (p-min {})", o.spec.model_draft, p.p_min)
                          : p.type == SpecType::NgramCache ? std::string("ngram-cache")
                                                           : fmt::format("{} n={}", spec_type_name(p.type), p.ngram_n);
  fmt::print(
      "| model | speculation | draft-max | prompt | n | t/s plain | t/s speculative | speedup | drafted | "
      "accepted | acceptance | tokens per verify | same output |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  fmt::print(
      "| {} | {} | {} | {} | {} | {:.2f} ± {:.2f} | {:.2f} ± {:.2f} | {:.2f}x | {} | {} | {:.1f} % | {:.2f} | {} |\n",
      o.model, how, p.n_max, prompt.size(), o.n_gen, a.mean, a.sd, b.mean, b.sd, b.mean / a.mean, st.n_drafted,
      st.n_accepted, 100.0 * st.acceptance(),
      st.n_verify > 0 ? double(st.n_accepted + st.n_verify) / double(st.n_verify) : 0.0, same_text);
  fmt::print("\nbuild: {} (opal), isa: {}, threads: {}, repetitions: {}\n", git_commit(), cpu::isa_description(),
             o.context.thread_count(), o.repetitions);
  finish_draft(draft);
  return same ? 0 : 1;
}

}  // namespace

void add_bench_spec_command(CLI::App& app) {
  auto o = std::make_shared<BenchSpecOptions>();
  CLI::App* sub =
      app.add_subcommand("bench-spec", "Speculative decoding speed: greedy generation with and without a draft");
  add_model_options(sub, &o->model, &o->load, ModelDefault::BuiltIn);
  sub->add_option("-p,--prompt", o->prompt, "prompt text (default: Once upon a time)");
  sub->add_option("-f,--file", o->file, "read the prompt from a file");
  sub->add_option("-n,--n-gen", o->n_gen, "tokens to generate (128)");
  sub->add_option("-r,--repetitions", o->repetitions, "timed runs of each (3)");
  add_engine_options(sub, o->context, o->backend, o->perf);
  add_spec_options(sub, o->spec);
  set_action(sub, [o] { return run_bench_spec(*o); });
}

}  // namespace opal::tools
