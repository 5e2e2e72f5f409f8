// Cost of one Sampler::sample() call on a 151936-token vocabulary (Qwen2-size)
// for llama.cpp's default chain, greedy, pure softmax, and a chain with the
// penalties and top_p alone. Logits: normal(0, 2), fixed seed.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace {

constexpr int32_t kVocab = 151936;

const std::vector<float>& logits() {
  static const std::vector<float> v = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> out(kVocab);
    for (float& x : out) x = normal(rng);
    return out;
  }();
  return v;
}

void run(benchmark::State& state, opal::SamplerParams p) {
  p.seed = 1;
  opal::Sampler s(p, kVocab);
  for (int32_t t = 0; t < 64; ++t) s.accept(t * 101);
  const float* l = logits().data();
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(l));
  state.SetItemsProcessed(state.iterations());
}

void BM_DefaultChain(benchmark::State& state) { run(state, opal::SamplerParams{}); }

void BM_Greedy(benchmark::State& state) {
  opal::SamplerParams p;
  p.temp = 0.0f;
  run(state, p);
}

void BM_FullSoftmax(benchmark::State& state) {
  opal::SamplerParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temp = 1.0f;
  run(state, p);
}

void BM_PenaltiesTopP(benchmark::State& state) {
  opal::SamplerParams p;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.top_p = 0.9f;
  p.repeat_penalty = 1.1f;
  p.frequency_penalty = 0.1f;
  run(state, p);
}

}  // namespace

BENCHMARK(BM_DefaultChain)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullSoftmax)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PenaltiesTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
