// `opal embed` through the binary: llama-embedding's flags (-f with
// --embd-separator, --pooling, --embd-output-format json/array/json+,
// --embd-normalize) against llama.cpp's golden vectors
// (../shared/golden/embeddings), the plain-lines default with pooling none
// (the tiny GGUFs have no pooling_type), and bad flags named.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "support/test_support.h"

namespace opal {
namespace {

std::string embed(const std::string& args, int* rc = nullptr) {
  std::string out;
  const int r = test::run_command("{ " + test::opal_binary() + " embed -t 1 " + args + " 2>/dev/null; }", &out);
  if (rc) *rc = r;
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::string texts_file() {
  const std::string path = test::temp_dir() + "/texts.txt";
  std::ofstream(path) << "The quick brown fox jumps over the lazy dog.<#sep#>Once upon a time, there was a little "
                         "robot.<#sep#>Embeddings map text to vectors; similar texts land close together.";
  return path;
}

TEST(CmdEmbed, JsonMatchesLlamaEmbeddingGolden) {
  for (const char* pool : {"last", "mean"}) {
    SCOPED_TRACE(pool);
    int rc = 0;
    const std::string out = embed("-m " + test::golden_model("tiny-qwen3-f32") + " -f " + texts_file() +
                                      " --embd-separator '<#sep#>' --pooling " + pool + " --embd-output-format json",
                                  &rc);
    ASSERT_EQ(rc, 0) << out;
    const auto got = nlohmann::json::parse(out);
    std::ifstream f(test::shared_path(std::string("golden/embeddings/tiny-qwen3-f32.") + pool + ".json"));
    const auto want = nlohmann::json::parse(f);
    ASSERT_EQ(got["data"].size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_GE(cosine(got["data"][i]["embedding"].get<std::vector<float>>(),
                       want["data"][i]["embedding"].get<std::vector<float>>()),
                0.9999)
          << i;
  }
}

TEST(CmdEmbed, ArrayJsonPlusAndPoolingNone) {
  const std::string m = "-m " + test::golden_model("tiny-llama-f32");
  int rc = 0;
  const auto arr = nlohmann::json::parse(embed(m + " -p 'a cat\na dog' --pooling cls --embd-output-format array", &rc));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(arr.size(), 2u);
  EXPECT_EQ(arr[0].size(), 256u);
  const auto plus = nlohmann::json::parse(embed(m + " -p 'a cat\na dog' --pooling mean --embd-output-format json+"));
  ASSERT_EQ(plus["cosineSimilarity"].size(), 2u);
  EXPECT_NEAR(plus["cosineSimilarity"][0][0].get<double>(), 1.0, 1e-5);
  EXPECT_LT(plus["cosineSimilarity"][0][1].get<double>(), 0.9999);
  // No pooling_type in the GGUF and no --pooling: every token's vector, one line each.
  std::string tok;
  ASSERT_EQ(test::run_command("{ " + test::opal_binary() + " tokenize -m " + test::golden_model("tiny-llama-f32") +
                                  " -p 'a cat' --ids 2>/dev/null; }",
                              &tok),
            0);
  const size_t n_tokens = nlohmann::json::parse(tok).size();
  const std::string lines = embed(m + " -p 'a cat' --embd-normalize -1");
  EXPECT_EQ(size_t(std::count(lines.begin(), lines.end(), '\n')), n_tokens) << lines.substr(0, 300);
  EXPECT_EQ(lines.rfind("embedding 0: ", 0), 0u);
}

TEST(CmdEmbed, BadFlagsAreNamed) {
  std::string out;
  const std::string m = "-m " + test::golden_model("tiny-llama-f32");
  EXPECT_NE(test::run_command(test::opal_binary() + " embed " + m + " -p x --pooling max", &out), 0);
  EXPECT_NE(out.find("unknown pooling 'max'"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::opal_binary() + " embed " + m + " -p x --embd-output-format xml", &out), 0);
  EXPECT_NE(out.find("--embd-output-format: unknown format 'xml'"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::opal_binary() + " embed " + m + " -p '' --pooling last", &out), 0);
  EXPECT_NE(out.find("input 0 is empty"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
