// `opal quantize` against llama-quantize's golden files: same tensor order and
// per-tensor types for every recipe, the same tensor bytes for the legacy types
// (and the same file), and clear errors.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"
#include "core/quant/recipe.h"
#include "quant_test_util.h"

using namespace opal;

namespace {

struct CmdResult {
  int rc;
  std::string out;
};

CmdResult run_opal(const std::string& args) {
  CmdResult r;
  r.rc = test::run_command(test::opal_binary() + " " + args, &r.out);
  return r;
}

std::string tmp(const std::string& name) { return test::temp_dir() + "/" + name; }

// Quantizes FAMILY-f32 to TYPE and compares with llama.cpp's FAMILY-SUFFIX file.
void check_against_golden(const std::string& family, const std::string& type, const std::string& suffix,
                          bool same_bytes) {
  SCOPED_TRACE(family + " " + type);
  const std::string out = tmp(family + "-" + suffix + ".gguf");
  const CmdResult r = run_opal("quantize " + test::golden_model(family + "-f32") + " " + out + " " + type + " -t 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto ours = gguf::File::open(out);
  auto ref = gguf::File::open(test::golden_model(family + "-" + suffix));
  EXPECT_EQ(ours.require_int("general.file_type"), ref.require_int("general.file_type"));
  EXPECT_EQ(ours.require_int("general.quantization_version"), 2);
  ASSERT_EQ(ours.kvs().size(), ref.kvs().size());
  for (size_t i = 0; i < ours.kvs().size(); ++i) EXPECT_EQ(ours.kvs()[i].key, ref.kvs()[i].key);
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  int identical = 0;
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const auto& a = ours.tensors()[i];
    const auto& b = ref.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(dtype_name(a.type), std::string(dtype_name(b.type))) << b.name;
    EXPECT_EQ(a.ne, b.ne) << b.name;
    const bool eq = a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
    if (same_bytes) {
      EXPECT_TRUE(eq) << b.name << " differs from llama.cpp's bytes";
    }
    identical += eq;
  }
  std::printf("%s %s: %d of %zu tensors byte-identical to llama.cpp\n", family.c_str(), type.c_str(), identical,
              ref.tensors().size());
  if (same_bytes) {
    EXPECT_EQ(test::read_bytes(out), test::read_bytes(test::golden_model(family + "-" + suffix)));
  }
}

}  // namespace

TEST(QuantizeCli, KQuantRecipesChooseLlamaTypes) {
  check_against_golden("tiny-llama", "Q4_K_M", "q4_k_m", false);
  check_against_golden("tiny-llama", "Q3_K_M", "q3_k_m", false);
  check_against_golden("tiny-llama", "Q5_K_M", "q5_k_m", false);
  check_against_golden("tiny-llama", "Q2_K", "q2_k", false);
  check_against_golden("tiny-llama", "Q6_K", "q6_k", false);
}

TEST(QuantizeCli, TiedEmbeddingsAndExperts) {
  check_against_golden("tiny-qwen3", "Q4_K_M", "q4_k_m", false);  // token_embd acts as output: q6_K
  check_against_golden("tiny-qwen3", "Q6_K", "q6_k", false);
  check_against_golden("tiny-qwen3moe", "Q4_K_M", "q4_k_m", false);  // 8 experts: attn_k/v q8_0, attn_output q5_K
}

TEST(QuantizeCli, LegacyTypesSameBytesAsLlama) {
  check_against_golden("tiny-llama", "Q8_0", "q8_0", true);
  check_against_golden("tiny-llama", "q4_0", "q4_0", true);  // lowercase name
  check_against_golden("tiny-llama", "3", "q4_1", true);     // LLAMA_FTYPE_MOSTLY_Q4_1
  check_against_golden("tiny-llama", "Q5_0", "q5_0", true);
  check_against_golden("tiny-llama", "Q5_1", "q5_1", true);
  check_against_golden("tiny-qwen3", "Q8_0", "q8_0", true);
  check_against_golden("tiny-qwen3", "Q4_0", "q4_0", true);
  check_against_golden("tiny-qwen3moe", "Q8_0", "q8_0", true);
}

TEST(QuantizeCli, FloatTypesMatchLlama) {
  check_against_golden("tiny-llama", "F16", "f16", true);
  check_against_golden("tiny-llama", "bf16", "bf16", true);
}

TEST(QuantizeCli, ThreadCountDoesNotChangeOutput) {
  const std::string src = test::golden_model("tiny-llama-f32");
  ASSERT_EQ(run_opal("quantize " + src + " " + tmp("t1.gguf") + " Q4_K_M -t 1").rc, 0);
  ASSERT_EQ(run_opal("quantize " + src + " " + tmp("t3.gguf") + " 15 --threads 3").rc, 0);
  EXPECT_EQ(test::read_bytes(tmp("t1.gguf")), test::read_bytes(tmp("t3.gguf")));
}

TEST(QuantizeCli, PureAndOverrides) {
  const std::string src = test::golden_model("tiny-llama-f32");
  const std::string out = tmp("pure.gguf");
  const CmdResult r =
      run_opal("quantize " + src + " " + out + " Q4_K_M --pure --output-tensor-type q8_0 --token-embedding-type f16");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto f = gguf::File::open(out);
  for (const auto& t : f.tensors()) {
    DType want = t.ne.size() < 2 ? DType::F32 : DType::Q4_K;
    if (t.name == "output.weight") want = DType::Q8_0;
    if (t.name == "token_embd.weight") want = DType::F16;
    EXPECT_EQ(dtype_name(t.type), std::string(dtype_name(want))) << t.name;
  }
}

TEST(QuantizeCli, ClearErrors) {
  const std::string src = test::golden_model("tiny-llama-f32");
  CmdResult r = run_opal("quantize " + src + " " + tmp("x.gguf") + " Q9_Z");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unknown quantization type 'Q9_Z'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Q4_K_M"), std::string::npos) << r.out;  // lists the valid names

  r = run_opal("quantize " + test::golden_model("tiny-llama-q4_0") + " " + tmp("rq.gguf") + " Q8_0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("already quantized"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--allow-requantize"), std::string::npos) << r.out;
  r = run_opal("quantize " + test::golden_model("tiny-llama-q4_0") + " " + tmp("rq.gguf") + " Q8_0 --allow-requantize");
  EXPECT_EQ(r.rc, 0) << r.out;

  r = run_opal("quantize " + src + " /nonexistent-opal-dir/out.gguf Q8_0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("/nonexistent-opal-dir"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;

  r = run_opal("quantize " + src + " " + tmp("y.gguf") + " Q4_K_M --output-tensor-type q9");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--output-tensor-type q9"), std::string::npos) << r.out;

  r = run_opal("quantize /nonexistent-opal-input.gguf " + tmp("z.gguf") + " Q8_0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("nonexistent-opal-input.gguf"), std::string::npos) << r.out;
}

// The shape fallback and the parser, on synthetic descriptions.
TEST(QuantizeRecipe, FallbacksAndNames) {
  using quant::FileType;
  EXPECT_EQ(quant::parse_file_type("q4_k_m"), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(quant::parse_file_type("Q4_K"), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(quant::parse_file_type("17"), FileType::MOSTLY_Q5_K_M);
  EXPECT_EQ(quant::parse_file_type("32"), FileType::MOSTLY_BF16);
  EXPECT_FALSE(quant::parse_file_type("4"));  // a removed llama.cpp ftype
  EXPECT_FALSE(quant::parse_file_type("Q4_K_X"));
  quant::ModelShape m{"llama", 1, 4, 4, 0};
  std::vector<quant::TensorDesc> ts = {
      {"output.weight", {96, 10}, DType::F32},          // 96 % 256 != 0 -> q8_0
      {"blk.0.attn_q.weight", {96, 96}, DType::F32},    // q4_K -> q5_0
      {"blk.0.ffn_down.weight", {48, 96}, DType::F32},  // q6_K (more bits) -> q8_0 -> 48 % 32 -> f16
      {"blk.0.attn_norm.weight", {96}, DType::F32},     // 1-D: kept
  };
  quant::RecipeOptions opt;
  opt.ftype = FileType::MOSTLY_Q4_K_M;
  std::vector<std::string> notes;
  const auto types = quant::choose_tensor_types(m, ts, opt, &notes);
  EXPECT_EQ(types, (std::vector<DType>{DType::Q8_0, DType::Q5_0, DType::F16, DType::F32}));
  EXPECT_EQ(notes.size(), 2u);
  opt.ftype = FileType::MOSTLY_Q4_0;  // legacy type with no fallback: a clear error
  EXPECT_THROW(quant::choose_tensor_types(m, {{"blk.0.attn_q.weight", {48, 96}, DType::F32}}, opt), Error);
}
