// sample() must not allocate after its first call (n_vocab can be 150k and it
// runs once per generated token). Counts global operator new calls.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "sampling/sampler.h"
#include "sampling_test_util.h"

namespace {
std::atomic<long> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Every form the library may call pairs with these (std::stable_sort's
// temporary buffer uses the nothrow form); a form left to the runtime would
// allocate with its own operator new and be freed here (ASan: mismatch).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
// GCC 12 at -O1 inlines these into gtest's `new TestClass` / `delete` pairs and,
// not seeing that the operator new above is malloc, warns of a mismatch
// (-Wmismatched-new-delete): a false positive, these are the matching pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace opal;

TEST(SamplerAlloc, SampleDoesNotAllocateAfterTheFirstCall) {
  const auto logits_a = test::random_logits(151936, 1, 2.0f);
  const auto logits_b = test::random_logits(151936, 2, 0.05f);  // flat: large top_p nucleus
  struct Config {
    const char* name;
    SamplerParams p;
  };
  std::vector<Config> configs;
  configs.push_back({"defaults", SamplerParams{}});
  SamplerParams everything;
  everything.top_k = 0;
  everything.typical_p = 0.9f;
  everything.top_n_sigma = 3.0f;
  everything.xtc_probability = 1.0f;
  everything.repeat_penalty = 1.2f;
  everything.frequency_penalty = 0.1f;
  everything.presence_penalty = 0.1f;
  everything.logit_bias = {{5, 1.0f}};
  configs.push_back({"every step", everything});
  SamplerParams greedy;
  greedy.temp = 0.0f;
  greedy.repeat_penalty = 1.1f;
  configs.push_back({"greedy", greedy});
  SamplerParams top_p_only = test::plain_params();
  top_p_only.top_p = 0.9f;
  configs.push_back({"top_p only", top_p_only});

  for (auto& c : configs) {
    c.p.seed = 1;
    Sampler s(c.p, 151936);
    for (int32_t t = 0; t < 100; ++t) s.accept(t * 37);
    // Warm up with both inputs so every buffer reaches its largest size.
    s.sample(logits_a.data());
    s.sample(logits_b.data());
    const long before = g_allocations.load();
    for (int i = 0; i < 6; ++i) {
      const int32_t t = s.sample(i % 2 ? logits_b.data() : logits_a.data());
      s.accept(t);
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << c.name;
  }
}
