// Perplexity with llama.cpp's method on stories260K and story.txt (tokens
// from ../shared/golden/story.tokens.json), -c 128 -b 128: llama.cpp reports
// [1]5.0090,[2]5.0259,[3]4.6168,[4]4.4401 (golden README); we must match the
// final value within 0.1 % and each running value within 0.1 %.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/perplexity.h"
#include "support/test_support.h"

namespace opal {
namespace {

TEST(Perplexity, Stories260KMatchesLlamaCpp) {
  std::ifstream f(test::shared_path("golden/story.tokens.json"));
  const auto j = nlohmann::json::parse(f);
  const std::vector<int32_t> tokens = j["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 577u);
  auto reg = make_registry({}, 1);
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), *reg);
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_batch = cp.n_ubatch = 128;
  Context ctx(*model, cp);
  int calls = 0;
  const PerplexityResult r = compute_perplexity(ctx, tokens, 128, 128, 1, [&](int64_t, int64_t, double) { ++calls; });
  EXPECT_EQ(r.n_chunks, 4);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(r.n_scored, 4 * 63);
  const double want[] = {5.0090, 5.0259, 4.6168, 4.4401};
  ASSERT_EQ(r.cumulative.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.cumulative[size_t(i)], want[i], want[i] * 1e-3) << "chunk " << i + 1;
  EXPECT_NEAR(r.ppl, 4.4401, 4.4401 * 1e-3);
  EXPECT_NEAR(r.uncertainty, 0.49336, 0.01);
}

TEST(Perplexity, TooFewTokensIsAClearError) {
  auto reg = make_registry({}, 1);
  auto model = Model::load(test::shared_path("models/stories260K.gguf"), *reg);
  ContextParams cp;
  cp.n_ctx = 128;
  Context ctx(*model, cp);
  test::expect_error([&] { compute_perplexity(ctx, std::vector<int32_t>(100, 5), 128, 128, 1); },
                     "fewer than one chunk");
}

}  // namespace
}  // namespace opal
