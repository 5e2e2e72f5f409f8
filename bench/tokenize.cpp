// Tokenization throughput (MB/s of input text) for llama-bpe (Llama-3), qwen2 and
// llama-spm (Llama-2 SentencePiece). The text is built in memory (about 4 MiB) by
// interleaving the tokenizer-vector texts with golden/story.txt, so it mixes plain
// English, code, digits, whitespace runs, emoji and CJK.
// Run: build/<dir>/bench_tokenize [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "core/gguf.h"
#include "tokenizer/vocab.h"

namespace {

std::string shared_dir() {
  const char* env = std::getenv("OPAL_SHARED_DIR");
  return env && *env ? env : OPAL_DEFAULT_SHARED_DIR;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "missing %s (set OPAL_SHARED_DIR)\n", path.c_str());
    std::exit(1);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string& bench_text() {
  static const std::string text = [] {
    const std::string inp = slurp(shared_dir() + "/tokenizer-vectors/ggml-vocab-llama-bpe.gguf.inp");
    const std::string story = slurp(shared_dir() + "/golden/story.txt");
    std::string vectors;
    for (size_t pos = 0; pos < inp.size();) {  // drop the separators
      const size_t next = inp.find("\n__ggml_vocab_test__\n", pos);
      vectors += inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos) + "\n";
      if (next == std::string::npos) break;
      pos = next + 21;
    }
    std::string t;
    while (t.size() < (4u << 20)) t += story + "\n" + story + "\n" + vectors;
    return t;
  }();
  return text;
}

const opal::Vocab& vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<opal::Vocab>> cache;
  auto& v = cache[name];
  if (!v) {
    const auto f = opal::gguf::File::open(shared_dir() + "/tokenizer-vectors/ggml-vocab-" + name + ".gguf");
    v = std::make_unique<opal::Vocab>(opal::Vocab::from_gguf(f));
  }
  return *v;
}

void BM_Tokenize(benchmark::State& state, const std::string& name) {
  const opal::Vocab& v = vocab(name);
  const std::string& text = bench_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = v.tokenize(text, true, false);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(n_tokens);
  state.counters["MiB"] = double(text.size()) / (1024.0 * 1024.0);
}

void BM_Detokenize(benchmark::State& state, const std::string& name) {
  const opal::Vocab& v = vocab(name);
  const std::string& text = bench_text();
  const auto ids = v.tokenize(text, false, false);
  for (auto _ : state) {
    auto s = v.detokenize(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

BENCHMARK_CAPTURE(BM_Tokenize, llama_bpe, std::string("llama-bpe"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Tokenize, qwen2, std::string("qwen2"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Tokenize, llama_spm, std::string("llama-spm"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Detokenize, llama_bpe, std::string("llama-bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Detokenize, llama_spm, std::string("llama-spm"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
