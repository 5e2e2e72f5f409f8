// Quantization against llama-quantize's files (shared/golden/models, made from
// the -f32 file of the same family without an importance matrix):
// - legacy types (q8_0, q4_0, q4_1, q5_0, q5_1) must reproduce the bytes exactly;
// - K-quants must have an RMSE vs the f32 source within 3 % of llama.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "quant_test_util.h"

using namespace opal;

namespace {

struct GoldenPair {
  std::string family;  // tiny-llama, tiny-qwen3, tiny-qwen3moe
  std::string quant;   // file suffix
};

// Counts the tensors of `type` in the quantized file whose bytes Opal reproduces.
void expect_exact(const GoldenPair& p, DType type) {
  auto src = gguf::File::open(test::golden_model(p.family + "-f32"));
  auto ref = gguf::File::open(test::golden_model(p.family + "-" + p.quant));
  int n = 0;
  for (const auto& t : ref.tensors()) {
    if (t.type != type) continue;
    SCOPED_TRACE(p.family + "-" + p.quant + " " + t.name);
    const auto* s = src.find_tensor(t.name);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->type, DType::F32);
    const auto got = test::quantize_tensor(test::dequantize_tensor(*s), s->ne[0], type);
    ASSERT_EQ(got.size(), t.nbytes);
    size_t first = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != t.data[i]) {
        first = i;
        break;
      }
    EXPECT_EQ(first, got.size()) << "first differing byte " << first << " (block " << first / type_size(type) << ")";
    ++n;
  }
  EXPECT_GT(n, 0) << "no " << dtype_name(type) << " tensor in " << p.family << "-" << p.quant;
}

}  // namespace

TEST(QuantGolden, Q8_0Exact) {
  expect_exact({"tiny-llama", "q8_0"}, DType::Q8_0);
  expect_exact({"tiny-qwen3", "q8_0"}, DType::Q8_0);
  expect_exact({"tiny-qwen3moe", "q8_0"}, DType::Q8_0);
}
TEST(QuantGolden, Q4_0Exact) {
  expect_exact({"tiny-llama", "q4_0"}, DType::Q4_0);
  expect_exact({"tiny-qwen3", "q4_0"}, DType::Q4_0);
}
TEST(QuantGolden, Q4_1Exact) { expect_exact({"tiny-llama", "q4_1"}, DType::Q4_1); }
TEST(QuantGolden, Q5_0Exact) { expect_exact({"tiny-llama", "q5_0"}, DType::Q5_0); }
TEST(QuantGolden, Q5_1Exact) { expect_exact({"tiny-llama", "q5_1"}, DType::Q5_1); }

// Every K-quant tensor of every golden file: RMSE(Opal) / RMSE(llama.cpp) <= 1.03.
TEST(QuantGolden, KQuantRmseWithin3Percent) {
  const std::vector<GoldenPair> files = {
      {"tiny-llama", "q2_k"},   {"tiny-llama", "q3_k_m"}, {"tiny-llama", "q4_k_m"},
      {"tiny-llama", "q5_k_m"}, {"tiny-llama", "q6_k"},   {"tiny-llama", "q4_0"},
      {"tiny-qwen3", "q4_k_m"}, {"tiny-qwen3", "q6_k"},   {"tiny-qwen3moe", "q4_k_m"},
  };
  std::map<std::string, double> worst;  // type -> worst ratio
  std::map<std::string, int> count, identical;
  for (const auto& p : files) {
    auto src = gguf::File::open(test::golden_model(p.family + "-f32"));
    auto ref = gguf::File::open(test::golden_model(p.family + "-" + p.quant));
    for (const auto& t : ref.tensors()) {
      if (t.type != DType::Q2_K && t.type != DType::Q3_K && t.type != DType::Q4_K && t.type != DType::Q5_K &&
          t.type != DType::Q6_K)
        continue;
      SCOPED_TRACE(p.family + "-" + p.quant + " " + t.name);
      const auto* s = src.find_tensor(t.name);
      ASSERT_NE(s, nullptr);
      const auto x = test::dequantize_tensor(*s);
      const auto ours = test::quantize_tensor(x, s->ne[0], t.type);
      ASSERT_EQ(ours.size(), t.nbytes);
      std::vector<float> ours_f(x.size());
      dequantize_row(t.type, ours.data(), ours_f.data(), int64_t(x.size()));
      const double e_ours = test::rmse(x, ours_f), e_ref = test::rmse(x, test::dequantize_tensor(t));
      ASSERT_GT(e_ref, 0.0);
      const double ratio = e_ours / e_ref;
      EXPECT_LE(ratio, 1.03) << "RMSE " << e_ours << " vs llama.cpp " << e_ref;
      const std::string ty = dtype_name(t.type);
      worst[ty] = std::max(worst[ty], ratio);
      count[ty]++;
      identical[ty] += std::equal(ours.begin(), ours.end(), t.data);
    }
  }
  for (const char* ty : {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K"}) {
    EXPECT_GT(count[ty], 0) << ty;
    std::printf("%s: %d tensors, worst RMSE ratio vs llama.cpp %.4f, byte-identical %d\n", ty, count[ty], worst[ty],
                identical[ty]);
  }
}
