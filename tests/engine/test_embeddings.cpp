// Embeddings (runtime/embedding.h) against llama.cpp's llama-embedding vectors
// in ../shared/golden/embeddings (README section "Embeddings": three texts,
// pooling last and mean, L2-normalised): cosine >= 0.9999 per vector for f32
// files, >= 0.999 for q8_0. Also: batching many inputs into one decode gives
// the vectors of one input at a time, pooling none gives every token's vector
// (whose last is the last-pooled one), the GGUF's pooling type, normalisation,
// and the errors for bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/embedding.h"
#include "support/test_support.h"
#include "tokenizer/vocab.h"

namespace opal {
namespace {

const char* const kTexts[] = {"The quick brown fox jumps over the lazy dog.",
                              "Once upon a time, there was a little robot.",
                              "Embeddings map text to vectors; similar texts land close together."};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

struct Loaded {
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Model> model;
  std::optional<Vocab> vocab;
  std::unique_ptr<Context> ctx;
  std::vector<std::vector<int32_t>> inputs;
  explicit Loaded(const std::string& stem, int n_seq_max = 8) {
    reg = make_registry({}, 1);
    model = Model::load(test::golden_model(stem), *reg);
    vocab.emplace(Vocab::from_gguf(model->gguf()));
    ContextParams cp;
    cp.n_ctx = 128;
    cp.n_batch = 128;
    cp.n_seq_max = n_seq_max;
    ctx = std::make_unique<Context>(*model, cp);
    for (const char* t : kTexts) inputs.push_back(vocab->tokenize(t, true, true));
  }
};

TEST(Embeddings, MatchLlamaCppGoldenVectors) {
  const std::string dir = test::shared_path("golden/embeddings");
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir << " is missing (set OPAL_SHARED_DIR)";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 6u) << "expected the README's six golden files in " << dir;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    // STEM.POOL.json
    const std::string base = f.substr(0, f.size() - 5);
    const size_t dot = base.rfind('.');
    ASSERT_NE(dot, std::string::npos);
    const std::string stem = base.substr(0, dot), pool = base.substr(dot + 1);
    std::ifstream in(dir + "/" + f);
    const nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_EQ(j["data"].size(), std::size(kTexts));
    Loaded l(stem);
    const auto got = embed(*l.ctx, l.inputs, {.pooling = pooling_from_name(pool), .normalize = 2});
    const double bar = stem.find("q8_0") != std::string::npos ? 0.999 : 0.9999;
    for (size_t i = 0; i < std::size(kTexts); ++i) {
      const auto want = j["data"][i]["embedding"].get<std::vector<float>>();
      ASSERT_EQ(got[i].size(), 1u);
      ASSERT_EQ(got[i][0].size(), want.size());
      const double c = cosine(got[i][0], want);
      std::printf("[embeddings] %s text %zu: cosine %.7f\n", base.c_str(), i, c);
      EXPECT_GE(c, bar) << "text " << i;
    }
  }
}

TEST(Embeddings, BatchedInputsEqualOneAtATime) {
  Loaded batched("tiny-qwen3-f32"), single("tiny-qwen3-f32", 1);
  for (Pooling p : {Pooling::Last, Pooling::Mean, Pooling::Cls}) {
    const auto a = embed(*batched.ctx, batched.inputs, {.pooling = p});
    const auto b = embed(*single.ctx, single.inputs, {.pooling = p});
    for (size_t i = 0; i < a.size(); ++i) EXPECT_GT(cosine(a[i][0], b[i][0]), 0.99999) << pooling_name(p) << " " << i;
    // Different texts give different vectors (a wrong sequence mask would mix them).
    EXPECT_LT(cosine(a[0][0], a[1][0]), 0.999) << pooling_name(p);
  }
}

TEST(Embeddings, PoolingNoneGivesEveryTokenAndLastIsItsLastRow) {
  Loaded l("tiny-llama-f32");
  const auto none = embed(*l.ctx, l.inputs, {.pooling = Pooling::None});
  const auto last = embed(*l.ctx, l.inputs, {.pooling = Pooling::Last});
  const auto raw = embed(*l.ctx, l.inputs, {.pooling = Pooling::Last, .normalize = -1});
  for (size_t i = 0; i < l.inputs.size(); ++i) {
    ASSERT_EQ(none[i].size(), l.inputs[i].size());
    EXPECT_GT(cosine(none[i].back(), last[i][0]), 0.99999);
    double n2 = 0, r2 = 0;
    for (float x : last[i][0]) n2 += double(x) * x;
    for (float x : raw[i][0]) r2 += double(x) * x;
    EXPECT_NEAR(n2, 1.0, 1e-5);
    EXPECT_GT(std::fabs(r2 - 1.0), 1e-3) << "the unnormalised vector should not have unit length";
  }
}

TEST(Embeddings, NormalizeAsLlamaCpp) {
  std::vector<float> v{3, -4};
  normalize_embedding(v.data(), 2, 2);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], -0.8f);
  v = {1, -2};
  normalize_embedding(v.data(), 2, 0);  // max-abs to the int16 range
  EXPECT_FLOAT_EQ(v[1], -32760.0f);
  v = {1, 1};
  normalize_embedding(v.data(), 2, 1);  // p = 1 (taxicab)
  EXPECT_FLOAT_EQ(v[0], 0.5f);
  v = {2, 0};
  normalize_embedding(v.data(), 2, -1);
  EXPECT_FLOAT_EQ(v[0], 2.0f);
}

TEST(Embeddings, GgufPoolingTypeAndNames) {
  Loaded l("tiny-qwen3-f32");
  EXPECT_FALSE(model_has_pooling(*l.model));
  EXPECT_EQ(model_pooling(*l.model), Pooling::None);  // llama.cpp's default when the key is absent
  EXPECT_EQ(pooling_from_name("cls"), Pooling::Cls);
  EXPECT_NE(test::error_of([] { pooling_from_name("max"); }).find("unknown pooling 'max'"), std::string::npos);
}

TEST(Embeddings, BadInputIsNamed) {
  Loaded l("tiny-qwen3-f32");
  EXPECT_NE(test::error_of([&] { embed(*l.ctx, {l.inputs[0], {}}, {}); }).find("input 1 is empty"), std::string::npos);
  const std::vector<int32_t> longer(200, l.inputs[0][0]);
  const std::string e = test::error_of([&] { embed(*l.ctx, {longer}, {}); });
  EXPECT_NE(e.find("input 0 has 200 tokens"), std::string::npos) << e;
  EXPECT_NE(test::error_of([&] { embed(*l.ctx, l.inputs, {.pooling = Pooling::Rank}); }).find("rank pooling"),
            std::string::npos);
  // decode_embeddings() leaves hidden states, not logits.
  Batch b;
  b.add(l.inputs[0][0], 0, 0, true);
  l.ctx->decode_embeddings(b);
  EXPECT_NE(test::error_of([&] { l.ctx->logits(0); }).find("decode_embeddings"), std::string::npos);
  EXPECT_EQ(test::error_of([&] { l.ctx->embedding(0); }), "");
}

}  // namespace
}  // namespace opal
