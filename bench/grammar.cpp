// Cost of the grammar mask on a real vocabulary (e.g. Qwen3's 151,669 tokens
// from `opal synth --preset qwen3-0.6b`), given as OPAL_GRAMMAR_MODEL=path.gguf:
//   trie:         building the vocabulary trie (once per model)
//   mask/<case>:  one request: a fresh GrammarState follows a fixed JSON answer
//                 token by token (the vocabulary's own tokenization of it),
//                 computing the full mask (mask_logits over n_vocab floats)
//                 before each token; reports the mean time per token. The
//                 per-state mask cache starts empty, as in a new request.
// Run: OPAL_GRAMMAR_MODEL=/tmp/qwen3-0.6b-q4_0.gguf build/release/bench_grammar
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "runtime/grammar_vocab.h"
#include "sampling/grammar.h"
#include "tokenizer/vocab.h"

namespace {

using namespace opal;

struct Setup {
  std::optional<Vocab> vocab;
  std::shared_ptr<const GrammarVocab> gv;
};

Setup* setup() {
  static Setup* s = [] {
    auto* out = new Setup;
    const char* path = std::getenv("OPAL_GRAMMAR_MODEL");
    if (!path) return out;
    const gguf::File f = gguf::File::open(path);
    out->vocab.emplace(Vocab::from_gguf(f));
    out->gv = make_grammar_vocab(*out->vocab);
    return out;
  }();
  return s;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},
  "age":{"type":"integer"},"email":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5},
  "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string"}},"required":["city","zip"]}},
  "required":["name","age","email","tags","address"],"additionalProperties":false})";
const char* kAnswer =
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "poetry", "engines"], )"
    R"("address": {"city": "London", "zip": "W1 4AB"}})";

void BM_Trie(benchmark::State& state) {
  Setup* s = setup();
  if (!s->vocab) {
    state.SkipWithError("set OPAL_GRAMMAR_MODEL to a GGUF file");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(make_grammar_vocab(*s->vocab));
}

void run_mask(benchmark::State& state, const std::string& gbnf, const std::string& answer) {
  Setup* s = setup();
  if (!s->vocab) {
    state.SkipWithError("set OPAL_GRAMMAR_MODEL to a GGUF file");
    return;
  }
  const auto g = Grammar::parse(gbnf);
  const std::vector<int32_t> toks = s->vocab->tokenize(answer, false, false);
  std::vector<float> logits(static_cast<size_t>(s->gv->n_vocab()));
  int64_t n = 0;
  for (auto _ : state) {
    GrammarState st(g, s->gv);
    for (int32_t t : toks) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      benchmark::DoNotOptimize(st.mask_logits(logits.data()));
      if (logits[t] != 0.0f) {
        state.SkipWithError("the answer's token was masked");
        return;
      }
      st.accept(t);
      ++n;
    }
  }
  state.counters["tokens"] = static_cast<double>(toks.size());
  state.counters["per_token"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_MaskSchema(benchmark::State& state) { run_mask(state, json_schema_to_gbnf(kSchema), kAnswer); }
void BM_MaskJsonObject(benchmark::State& state) { run_mask(state, json_object_gbnf(), kAnswer); }
// The worst case: inside a bounded string every position is a new state (no
// cache hit) and nearly every token is allowed (the whole trie is walked).
void BM_MaskBoundedString(benchmark::State& state) {
  run_mask(state, "root ::= \"\\\"\" [^\"]{0,200} \"\\\"\"",
           "\"Ada Lovelace wrote the first program for the Analytical Engine in 1843, notes on Menabrea.\"");
}

BENCHMARK(BM_Trie)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskSchema)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskJsonObject)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskBoundedString)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
