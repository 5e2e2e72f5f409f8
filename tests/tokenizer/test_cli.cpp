// `opal tokenize`, run as a program.
#include <gtest/gtest.h>

#include <fstream>

#include "support/test_support.h"
#include "tokenizer/vectors.h"

namespace opal::test {
namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The expected ids of one text, from llama.cpp's vectors for llama-spm.
std::vector<int32_t> expected_ids(const std::string& text) {
  for (const auto& c : read_vectors(shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp"),
                                    shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf.out")))
    if (c.text == text) return c.ids;
  ADD_FAILURE() << "no vector for '" << text << "'";
  return {};
}

std::string json_list(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

TEST(TokenizeCli, IdsAsOneJsonLine) {
  const std::string model = shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  auto ids = expected_ids("Hello world");
  std::string out;
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -p 'Hello world' --ids --no-bos", &out), 0) << out;
  EXPECT_EQ(out, json_list(ids) + "\n");
  ids.insert(ids.begin(), 1);  // BOS by default, as llama-tokenize
  out.clear();
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -p 'Hello world' --ids", &out), 0) << out;
  EXPECT_EQ(out, json_list(ids) + "\n");
}

TEST(TokenizeCli, DefaultListingAndFile) {
  const std::string model = shared_path("tokenizer-vectors/ggml-vocab-llama-bpe.gguf");
  const std::string path = temp_dir() + "/text.txt";
  std::ofstream(path) << "Hello world";
  std::string out;
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -f " + path, &out), 0) << out;
  // Llama-3: BOS, "Hello", " world" (ids from PROVENANCE.md's llama-tokenize check).
  EXPECT_EQ(out, "128000 -> '<|begin_of_text|>'\n  9906 -> 'Hello'\n  1917 -> ' world'\n");
  out.clear();
  ASSERT_EQ(
      run_command(opal_binary() + " tokenize -m " + model + " -p " + quote("<|eot_id|>") + " --ids --no-bos", &out), 0);
  EXPECT_EQ(out, "[128009]\n");
  out.clear();
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -p " + quote("<|eot_id|>") +
                            " --ids --no-bos --no-parse-special",
                        &out),
            0);
  EXPECT_NE(out, "[128009]\n");
  EXPECT_EQ(out.front(), '[');
  out.clear();
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -p 'Hello world' --pieces --no-bos", &out), 0);
  EXPECT_EQ(out, "[\"Hello\",\" world\"]\n");
  out.clear();
  ASSERT_EQ(run_command(opal_binary() + " tokenize -m " + model + " -p '' --ids --no-bos", &out), 0);
  EXPECT_EQ(out, "[]\n");
}

TEST(TokenizeCli, Errors) {
  std::string out;
  EXPECT_NE(run_command(opal_binary() + " tokenize -m /nonexistent.gguf -p hi", &out), 0);
  EXPECT_NE(out.find("nonexistent"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run_command(opal_binary() + " tokenize -m " + shared_path("tokenizer-vectors/ggml-vocab-gpt-2.gguf"), &out),
            0);
  EXPECT_NE(out.find("-p"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal::test
