// `opal embed -m MODEL (-p TEXT | -f FILE) [--pooling none|mean|cls|last]
// [--embd-normalize N] [--embd-output-format ""|array|json|json+] [--embd-separator S]`:
// embeddings of one or more texts, as llama.cpp's llama-embedding prints them.
// The text is split at the separator (default a newline) into inputs, each
// tokenized with special tokens added and parsed, embedded as its own
// sequence (runtime/embedding.h, many per batch), pooled as --pooling says
// (default: the GGUF's <arch>.pooling_type; absent: none, as llama.cpp, so
// every token's vector is printed) and normalised (-1 none, 0 max-abs,
// 2 L2 (default), p > 2 p-norm). Output formats:
//   "" (default): one line per vector, `embedding I: v v v ...`;
//   array: a JSON array of vectors; json: the OpenAI shape
//   {"object":"list","data":[{"object":"embedding","index":I,"embedding":[...]}]};
//   json+: json plus "cosineSimilarity", the matrix of the vectors' cosines.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "models/model.h"
#include "runtime/embedding.h"
#include "tokenizer/vocab.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/default_model.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"

namespace opal::tools {
namespace {

struct EmbedCmdOptions {
  LoadOptions load;
  std::string model;
  std::string prompt, file;
  std::string pooling;  // empty: the GGUF's
  int normalize = 2;
  std::string format;
  std::string separator = "\n";
  ContextOptions context;
  BackendOptions backend;
  PerfOptions perf;
};

std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  size_t i = 0;
  for (;;) {
    const size_t j = sep.empty() ? std::string::npos : text.find(sep, i);
    out.push_back(text.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + sep.size();
  }
  return out;
}

std::string number(float v) { return fmt::format("{:.7g}", v); }

std::string vector_json(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += number(v[i]);  // appended, not `"," + number(...)`: GCC 12 -O3 raises a false -Wrestrict on that
  }
  return s + "]";
}

int run_embed(EmbedCmdOptions o) {
  if (!o.file.empty()) {
    std::ifstream f(o.file, std::ios::binary);
    if (!f) fail("cannot read prompt file '{}'", o.file);
    std::stringstream ss;
    ss << f.rdbuf();
    o.prompt = ss.str();
  }
  if (o.format != "" && o.format != "array" && o.format != "json" && o.format != "json+")
    fail("--embd-output-format: unknown format '{}' (want array, json or json+, or none for plain lines)", o.format);
  std::vector<std::string> texts = split(o.prompt, o.separator);
  if (o.file.empty() == false && texts.size() > 1 && texts.back().empty()) texts.pop_back();  // a final newline
  const bool explicit_pooling = !o.pooling.empty();
  const Pooling forced = explicit_pooling ? pooling_from_name(o.pooling) : Pooling::None;
  ContextParams cp = o.context.params();
  if (o.model.empty()) o.model = default_model_path();
  auto reg = o.backend.make_registry(o.context.thread_count());
  auto model = Model::load(o.model, *reg, o.load);
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  const Pooling pooling = explicit_pooling ? forced : model_pooling(*model);
  if (!explicit_pooling && !model_has_pooling(*model))
    std::fprintf(stderr,
                 "opal: the GGUF has no %s.pooling_type: pooling none (every token's vector), as llama.cpp; "
                 "choose one with --pooling mean|cls|last\n",
                 model->hparams().arch.c_str());
  std::vector<std::vector<int32_t>> inputs;
  for (const auto& t : texts) inputs.push_back(vocab.tokenize(t, true, true));
  if (cp.n_ctx <= 0) {  // enough for the longest input, within the model's context
    size_t longest = 1;
    for (const auto& in : inputs) longest = std::max(longest, in.size());
    const int64_t train = model->hparams().n_ctx_train > 0 ? model->hparams().n_ctx_train : 2048;
    cp.n_ctx = std::min(train, std::max<int64_t>(int64_t(longest), std::min<int64_t>(cp.n_batch, train)));
  }
  cp.n_seq_max = model->hparams().recurrent ? 4 : 64;
  Context ctx(*model, cp);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  const auto result = embed(ctx, inputs, {.pooling = pooling, .normalize = o.normalize});
  std::fprintf(stderr, "opal: %zu inputs, %s pooling, normalize %d, n_embd %lld\n", inputs.size(),
               pooling_name(pooling), o.normalize, static_cast<long long>(ctx.n_embd()));

  std::vector<std::vector<float>> vectors;  // every vector in order (per token for pooling none)
  for (const auto& r : result) vectors.insert(vectors.end(), r.begin(), r.end());
  std::string out;
  if (o.format.empty()) {
    for (size_t i = 0; i < vectors.size(); ++i) {
      out += fmt::format("embedding {}:", i);
      for (float v : vectors[i]) out += fmt::format(" {:9.6f}", v);
      out += "\n";
    }
  } else if (o.format == "array") {
    out = "[";
    for (size_t i = 0; i < vectors.size(); ++i) out += (i ? "," : "") + vector_json(vectors[i]);
    out += "]\n";
  } else {
    out = "{\n  \"object\": \"list\",\n  \"data\": [\n";
    for (size_t i = 0; i < vectors.size(); ++i)
      out += fmt::format("    {{\"object\": \"embedding\", \"index\": {}, \"embedding\": {}}}{}\n", i,
                         vector_json(vectors[i]), i + 1 < vectors.size() ? "," : "");
    out += "  ]";
    if (o.format == "json+") {
      out += ",\n  \"cosineSimilarity\": [\n";
      for (size_t i = 0; i < vectors.size(); ++i) {
        std::vector<float> row;
        for (size_t j = 0; j < vectors.size(); ++j) {
          double ab = 0, aa = 0, bb = 0;
          for (size_t e = 0; e < vectors[i].size(); ++e) {
            ab += double(vectors[i][e]) * vectors[j][e];
            aa += double(vectors[i][e]) * vectors[i][e];
            bb += double(vectors[j][e]) * vectors[j][e];
          }
          row.push_back(aa > 0 && bb > 0 ? float(ab / std::sqrt(aa * bb)) : 0.0f);
        }
        out += "    " + vector_json(row) + (i + 1 < vectors.size() ? ",\n" : "\n");
      }
      out += "  ]";
    }
    out += "\n}\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return perf.finish();
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedCmdOptions>();
  CLI::App* sub = app.add_subcommand("embed", "Embeddings of texts (like llama-embedding)");
  add_model_options(sub, &o->model, &o->load, ModelDefault::BuiltIn);
  sub->add_option("-p,--prompt", o->prompt, "text; several inputs separated by --embd-separator");
  sub->add_option("-f,--file", o->file, "read the text from a file");
  sub->add_option("--pooling", o->pooling, "none, mean, cls or last (default: the GGUF's pooling_type)");
  sub->add_option("--embd-normalize", o->normalize,
                  "normalisation: -1 none, 0 max-abs (int16 range), 2 L2, p > 2 p-norm")
      ->capture_default_str();
  sub->add_option("--embd-output-format", o->format, "array, json or json+ (default: plain lines)");
  sub->add_option("--embd-separator", o->separator, "separator between inputs (default: a newline)");
  o->context.n_ctx = 0;
  add_engine_options(sub, o->context, o->backend, o->perf);
  set_action(sub, [o] { return run_embed(*o); });
}

}  // namespace opal::tools
