// Every .inp/.out pair of llama.cpp's tokenizer vectors, tokenized as
// test-tokenizer-0 does (add_special = false, parse_special = false), and the
// round trip detokenize(tokenize(x)) == x on the same texts where it is lossless.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_support.h"
#include "tokenizer/vectors.h"

namespace opal::test {
namespace {

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, MatchesLlamaCpp) {
  const std::string base = shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf");
  const Vocab& vocab = load_vocab(base);
  const auto cases = read_vectors(shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf.inp"),
                                  shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf.out"));
  ASSERT_GE(cases.size(), 40u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = vocab.tokenize(cases[i].text, false, false);
    if (got == cases[i].ids) {
      ++passed;
    } else {
      ADD_FAILURE() << GetParam() << " case " << i << " text '" << cases[i].text << "'\n  expected "
                    << ids_to_string(cases[i].ids) << "\n  got      " << ids_to_string(got);
    }
  }
  std::printf("[ vectors  ] %-15s %zu/%zu cases match llama.cpp\n", GetParam().c_str(), passed, cases.size());
  EXPECT_EQ(passed, cases.size());
}

// detokenize(tokenize(x)) == x. Not lossless, so not checked: WordPiece (lowercases,
// drops accents and spaces) and vocabularies with clean_spaces (the detokenizer
// removes the space in " ," by design).
TEST_P(TokenizerVectors, RoundTrip) {
  const Vocab& vocab = load_vocab(shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf"));
  const auto cases = read_vectors(shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf.inp"),
                                  shared_path("tokenizer-vectors/ggml-vocab-" + GetParam() + ".gguf.out"));
  if (vocab.type() == VocabType::Wpm) GTEST_SKIP() << "WordPiece normalisation is lossy";
  size_t checked = 0;
  for (const auto& c : cases) {
    // The expected ids decode to the text (checked upstream), so the detokenizer is
    // tested on llama.cpp's own ids, and our tokenization on the round trip.
    const std::string from_expected = vocab.detokenize(c.ids, false, true);
    const std::string from_ours = vocab.detokenize(vocab.tokenize(c.text, false, false), false, true);
    EXPECT_EQ(from_ours, from_expected) << GetParam() << " '" << c.text << "'";
    // Raw pieces (no space cleaning) always give back the text.
    std::string raw;
    for (int32_t id : vocab.tokenize(c.text, false, false)) raw += vocab.token_to_piece(id);
    const std::string want = vocab.add_space_prefix() ? " " + c.text : c.text;
    if (!c.text.empty()) {
      EXPECT_EQ(raw, want) << GetParam();
    }
    ++checked;
  }
  EXPECT_EQ(checked, cases.size());
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, TokenizerVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm",
                                           "deepseek-coder", "falcon", "mpt", "starcoder", "refact", "bert-bge"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Vectors in no-vocab-gguf/ need the real model's vocabulary, which is not in the
// shared data. They run as soon as such a GGUF is placed beside them.
TEST(TokenizerVectorsNoVocab, RunWhenVocabPresent) {
  const std::string dir = shared_path("tokenizer-vectors/no-vocab-gguf");
  size_t sets = 0, run = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (p.size() < 9 || p.substr(p.size() - 9) != ".gguf.inp") continue;
    ++sets;
    const std::string gguf_path = p.substr(0, p.size() - 4);
    if (!std::filesystem::exists(gguf_path)) {
      std::printf("[ vectors  ] %s: vocabulary GGUF not available, not run\n", e.path().filename().c_str());
      continue;
    }
    ++run;
    const Vocab& vocab = load_vocab(gguf_path);
    for (const auto& c : read_vectors(p, gguf_path + ".out"))
      EXPECT_EQ(ids_to_string(vocab.tokenize(c.text, false, false)), ids_to_string(c.ids))
          << p << " '" << c.text << "'";
  }
  EXPECT_GT(sets, 0u) << "no vector sets found in " << dir;
}

}  // namespace
}  // namespace opal::test
