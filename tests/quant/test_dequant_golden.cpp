// Dequantization against llama.cpp's (gguf-py's) dequantized tensors, bit for bit,
// and the old stories260K Q8_0 file against the f32 original.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/quant/blocks.h"
#include "quant_test_util.h"

using namespace opal;

TEST(Dequant, BlockSizesMatchDtypeTable) {
  EXPECT_EQ(sizeof(quant::BlockQ4_0), size_t(type_size(DType::Q4_0)));
  EXPECT_EQ(sizeof(quant::BlockQ4_1), size_t(type_size(DType::Q4_1)));
  EXPECT_EQ(sizeof(quant::BlockQ5_0), size_t(type_size(DType::Q5_0)));
  EXPECT_EQ(sizeof(quant::BlockQ5_1), size_t(type_size(DType::Q5_1)));
  EXPECT_EQ(sizeof(quant::BlockQ8_0), size_t(type_size(DType::Q8_0)));
  EXPECT_EQ(sizeof(quant::BlockQ2_K), size_t(type_size(DType::Q2_K)));
  EXPECT_EQ(sizeof(quant::BlockQ3_K), size_t(type_size(DType::Q3_K)));
  EXPECT_EQ(sizeof(quant::BlockQ4_K), size_t(type_size(DType::Q4_K)));
  EXPECT_EQ(sizeof(quant::BlockQ5_K), size_t(type_size(DType::Q5_K)));
  EXPECT_EQ(sizeof(quant::BlockQ6_K), size_t(type_size(DType::Q6_K)));
  EXPECT_EQ(sizeof(quant::BlockQ8_K), size_t(type_size(DType::Q8_K)));
  EXPECT_EQ(sizeof(quant::BlockIQ4_NL), size_t(type_size(DType::IQ4_NL)));
  EXPECT_EQ(sizeof(quant::BlockIQ4_XS), size_t(type_size(DType::IQ4_XS)));
}

TEST(Dequant, EveryReferenceTypeIsCovered) {
  for (DType t :
       {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
        DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS}) {
    EXPECT_TRUE(can_dequantize(t)) << dtype_name(t);
    EXPECT_EQ(can_quantize(t), t != DType::IQ4_XS) << dtype_name(t);
  }
  EXPECT_FALSE(can_dequantize(DType::IQ2_XXS));
  EXPECT_THROW(dequantize_row(DType::IQ2_XXS, nullptr, nullptr, 256), Error);
  float x[32] = {};
  EXPECT_THROW(dequantize_row(DType::Q4_0, x, x, 31), Error);  // not a whole block
}

// index.json: stem -> tensor -> {type, ne, file, n}; the .f32 is gguf-py's dequantization.
TEST(Dequant, GoldenTensorsBitExact) {
  const std::string dir = test::shared_path("golden/dequant");
  std::ifstream in(dir + "/index.json");
  ASSERT_TRUE(in.good());
  const auto index = nlohmann::json::parse(in);
  std::set<std::string> types_seen;
  int checked = 0;
  for (const auto& [stem, tensors] : index.items()) {
    auto f = gguf::File::open(test::golden_model(stem));
    for (const auto& [name, info] : tensors.items()) {
      SCOPED_TRACE(stem + " " + name);
      const auto* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(std::string(dtype_name(t->type)), [&] {
        std::string s = info["type"].get<std::string>();
        auto d = dtype_from_name(s);
        return d ? std::string(dtype_name(*d)) : s;
      }());
      const auto expected = test::read_f32_file(dir + "/" + info["file"].get<std::string>());
      ASSERT_EQ(int64_t(expected.size()), info["n"].get<int64_t>());
      ASSERT_EQ(int64_t(expected.size()), t->n_elements());
      const auto got = test::dequantize_tensor(*t);
      size_t first_diff = got.size();
      for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &expected[i], 4) != 0) {
          first_diff = i;
          break;
        }
      EXPECT_EQ(first_diff, got.size()) << "first difference at element " << first_diff << ": got " << got[first_diff]
                                        << ", llama.cpp " << expected[first_diff];
      types_seen.insert(dtype_name(t->type));
      ++checked;
    }
  }
  EXPECT_GE(checked, 28);
  // f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K
  EXPECT_EQ(types_seen.size(), 13u);
}

// A 2023 file whose Q8_0 tensors run blocks across rows: dequantized as one flat
// block stream, every tensor must be within 0.5 % of its abs-max of the f32 model
// (models/PROVENANCE.md measured 0.40 %).
TEST(Dequant, Stories260KQ8_0FlatBlocks) {
  auto q = gguf::File::open(test::shared_path("models/tinyllamas-stories-260k-q8_0.gguf"));
  auto f = gguf::File::open(test::shared_path("models/stories260K.gguf"));
  int n_q8 = 0, n_flat = 0;
  double worst = 0;
  for (const auto& t : q.tensors()) {
    SCOPED_TRACE(t.name);
    const auto* ref = f.find_tensor(t.name);
    ASSERT_NE(ref, nullptr);
    ASSERT_EQ(ref->n_elements(), t.n_elements());
    if (t.type != DType::Q8_0) continue;
    ++n_q8;
    n_flat += t.flat_blocks;
    const auto got = test::dequantize_tensor(t);
    const auto want = test::dequantize_tensor(*ref);
    float amax = 0, maxerr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      amax = std::max(amax, std::fabs(want[i]));
      maxerr = std::max(maxerr, std::fabs(got[i] - want[i]));
    }
    ASSERT_GT(amax, 0.0f);
    EXPECT_LE(maxerr / amax, 0.005f);
    worst = std::max(worst, double(maxerr / amax));
  }
  EXPECT_EQ(n_q8, 37);
  EXPECT_EQ(n_flat, 5);
  std::printf("stories260K q8_0: worst max error / abs-max = %.4f %%\n", 100 * worst);
}
