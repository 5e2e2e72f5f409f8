// `opal logits -m MODEL --tokens 1,2,3 [--greedy N] [--ctk f16|bf16|f32] [-t N] --out PREFIX`:
// evaluates the token list as one batch (logits at every position), then
// decodes N greedy tokens one at a time, and writes PREFIX.json,
// PREFIX.prompt_logits.f32 and PREFIX.gen_logits.f32 in the format of
// ../shared/golden/logits (see its README).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/generation.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"

namespace opal::tools {
namespace {

struct LogitsOptions {
  LoadOptions load;  // --lm / --no-mmap / --mlock
  std::string model;
  std::string tokens;
  int greedy = 0;
  ContextOptions context{.threads = 1};  // --ctk (also --kv) and -t; the context is sized from --tokens
  std::string out;
  BackendOptions backend;
  PerfOptions perf;
};

std::vector<int32_t> parse_tokens(const std::string& s) {
  std::vector<int32_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    try {
      size_t used = 0;
      long long x = std::stoll(item, &used);
      if (used != item.size() || x < INT32_MIN || x > INT32_MAX) throw std::invalid_argument("");
      v.push_back(int32_t(x));
    } catch (const std::exception&) {
      fail("--tokens: '{}' is not a token id", item);
    }
    i = j + 1;
  }
  if (v.empty()) fail("--tokens: no token ids given");
  return v;
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write '{}'", path);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  if (!f) fail("error writing '{}'", path);
}

int run_logits(const LogitsOptions& o) {
  const std::vector<int32_t> tokens = parse_tokens(o.tokens);
  if (o.greedy < 0) fail("--greedy must be >= 0");
  ContextParams cp = o.context.params();  // checks --ctk before loading
  cp.n_ctx = int64_t(tokens.size()) + o.greedy;
  cp.n_batch = cp.n_ubatch = int64_t(tokens.size());
  auto reg = o.backend.make_registry(o.context.thread_count());
  auto model = Model::load(o.model, *reg, o.load);
  Context ctx(*model, cp);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  const int64_t nv = ctx.n_vocab();

  // One batch (n_batch = the token count), logits at every position.
  std::vector<float> prompt(tokens.size() * size_t(nv));
  PromptOptions po;
  po.logits = PromptLogits::All;
  po.on_chunk = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      std::copy(ctx.logits(int64_t(i - begin)), ctx.logits(int64_t(i - begin)) + nv, prompt.begin() + int64_t(i) * nv);
  };
  decode_prompt(ctx, tokens, po);

  Batch b;

  std::vector<int32_t> greedy;
  std::vector<float> gen;
  int32_t next = argmax(ctx.logits(ctx.n_outputs() - 1), nv);
  for (int i = 0; i < o.greedy; ++i) {
    greedy.push_back(next);
    b.clear();
    b.add(next, int32_t(tokens.size()) + i, 0, true);
    ctx.decode(b);
    gen.insert(gen.end(), ctx.logits(0), ctx.logits(0) + nv);
    next = argmax(ctx.logits(0), nv);
  }

  nlohmann::json j;
  j["n_vocab"] = nv;
  j["prompt_tokens"] = tokens;
  j["greedy_tokens"] = greedy;
  j["kv_type"] = o.context.cache_type_k;
  std::ofstream jf(o.out + ".json");
  if (!jf) fail("cannot write '{}.json'", o.out);
  jf << j.dump() << "\n";
  write_f32(o.out + ".prompt_logits.f32", prompt);
  write_f32(o.out + ".gen_logits.f32", gen);
  return perf.finish();
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* sub = app.add_subcommand("logits", "Write prompt and greedy-decode logits in the golden-file format");
  add_model_options(sub, &o->model, &o->load, ModelDefault::Required);
  sub->add_option("--tokens", o->tokens, "comma-separated token ids, fed as one batch")->required();
  sub->add_option("--greedy", o->greedy, "greedy tokens to decode one at a time after the prompt");
  sub->add_option("--out", o->out, "output prefix")->required();
  add_engine_options(sub, o->context, o->backend, o->perf, kCacheTypeFlag | kThreadsFlag);
  sub->add_option("--kv", o->context.cache_type_k, "same as --ctk (the golden scripts' spelling)");
  set_action(sub, [o] { return run_logits(*o); });
}

}  // namespace opal::tools
