// The RWKV world tokenizer (tokenizer.ggml.model "rwkv") of the tiny-rwkv7
// golden models: llama.cpp's ids for the golden prompts, the special ids, the
// unescaping of token texts, and round trips of arbitrary bytes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "support/test_support.h"
#include "tokenizer/vectors.h"
#include "tokenizer/vocab_impl.h"

namespace opal::test {
namespace {

const Vocab& rwkv() { return load_vocab(shared_path("golden/models/tiny-rwkv7-f32.gguf")); }

std::vector<int32_t> golden_prompt_tokens(const std::string& stem) {
  const auto j = nlohmann::json::parse(read_file(shared_path("golden/logits/" + stem + ".json")));
  return j["prompt_tokens"].get<std::vector<int32_t>>();
}

std::string golden_prompt(const std::string& key) {
  return nlohmann::json::parse(read_file(shared_path("golden/prompts.json")))[key].get<std::string>();
}

TEST(TokenizerRwkv, GoldenPromptsMatchLlamaCpp) {
  const Vocab& v = rwkv();
  for (const auto& [key, stem] : {std::pair<std::string, std::string>{"tiny-rwkv7", "tiny-rwkv7-f32"},
                                  {"tiny-rwkv7-f32-long", "tiny-rwkv7-f32-long"}}) {
    const std::string text = golden_prompt(key);
    const auto want = golden_prompt_tokens(stem);
    const auto got = v.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
    EXPECT_EQ(ids_to_string(got), ids_to_string(want)) << stem;
    EXPECT_EQ(v.detokenize(got), text) << stem;
  }
  // Every type of the family carries the same vocabulary.
  for (const char* t : {"f16", "q8_0", "q4_0"}) {
    const Vocab& q = load_vocab(shared_path(std::string("golden/models/tiny-rwkv7-") + t + ".gguf"));
    EXPECT_EQ(q.tokenize(golden_prompt("tiny-rwkv7"), true, false), golden_prompt_tokens("tiny-rwkv7-f32")) << t;
  }
}

TEST(TokenizerRwkv, SpecialIdsAndFlags) {
  const Vocab& v = rwkv();
  EXPECT_EQ(v.type(), VocabType::Rwkv);
  EXPECT_EQ(v.type_name(), "RWKV");
  EXPECT_EQ(v.n_tokens(), 768);
  EXPECT_EQ(v.bos(), 0);
  EXPECT_EQ(v.eos(), 0);
  EXPECT_EQ(v.eot(), 261);
  EXPECT_FALSE(v.add_bos()) << "no BOS for RWKV, as llama.cpp";
  EXPECT_FALSE(v.add_eos());
  EXPECT_FALSE(v.add_space_prefix());
  EXPECT_TRUE(v.is_eog(0));
  EXPECT_TRUE(v.is_eog(261));
  EXPECT_TRUE(v.is_control(0));
  EXPECT_EQ(v.token_to_piece(261), "\n\n");
  EXPECT_EQ(v.token_to_piece(1), std::string(1, '\0'));
  EXPECT_EQ(v.token_to_piece(256), "\xff");
  EXPECT_EQ(v.token_to_piece(0, /*special=*/false), "");
  EXPECT_EQ(v.token_to_piece(0, true), "<s>");
  EXPECT_EQ(v.nl(), v.tokenize("\n", false, false).at(0));
  // Greedy longest match: "\n\n" is one token, not two newlines.
  EXPECT_EQ(v.tokenize("\n\n", false, false), std::vector<int32_t>{261});
  // No space prefix and no normalization.
  EXPECT_EQ(v.tokenize(" ", false, false), std::vector<int32_t>{33});
  EXPECT_TRUE(v.tokenize("", true, false).empty());
  // "<s>" is in the trie too (llama.cpp inserts every token), so it is id 0 either way.
  EXPECT_EQ(v.tokenize("<s>", false, true), std::vector<int32_t>{0});
  EXPECT_EQ(v.tokenize("<s>", false, false), std::vector<int32_t>{0});
}

TEST(TokenizerRwkv, Unescape) {
  EXPECT_EQ(rwkv_unescape("abc"), "abc");
  EXPECT_EQ(rwkv_unescape("\\x00\\xff\\x7f"), std::string("\x00\xff\x7f", 3));
  EXPECT_EQ(rwkv_unescape("\\t\\n\\r"), "\t\n\r");
  EXPECT_EQ(rwkv_unescape("\\\\ \\'"), "\\ '");
  EXPECT_EQ(rwkv_unescape("caf\\xc3\\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(rwkv_unescape("\\"), "") << "a trailing backslash is dropped, not read past";
  EXPECT_EQ(rwkv_unescape("\\x4"), "") << "a truncated hex escape is dropped";
  // Every single-byte token (ids 1-256) is its byte.
  const Vocab& v = rwkv();
  for (int b = 0; b < 256; ++b) ASSERT_EQ(v.token_to_piece(b + 1), std::string(1, char(b))) << b;
}

// Arbitrary bytes (invalid UTF-8, NULs, control characters) tokenize without
// error into ids in range and detokenize to the same bytes; the result is the
// greedy longest match (no token could be extended).
TEST(TokenizerRwkv, ArbitraryBytesRoundTrip) {
  const Vocab& v = rwkv();
  std::mt19937 rng(17);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(size_t(rng() % 200), '\0');
    const bool ascii = iter % 2 == 0;
    for (char& c : s) c = char(ascii ? 32 + rng() % 95 : rng() % 256);
    const auto ids = v.tokenize(s, true, iter % 3 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < v.n_tokens());
    ASSERT_EQ(v.detokenize(ids), s);
    // Greedy: the bytes of token i followed by the first byte of token i+1 are no token.
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const std::string ext = v.token_to_piece(ids[i]) + v.token_to_piece(ids[i + 1]).substr(0, 1);
      bool is_token = false;
      for (int32_t id = 1; id < v.n_tokens() && !is_token; ++id) is_token = v.token_to_piece(id) == ext;
      if (ids[i] != 0 && ids[i + 1] != 0) {
        ASSERT_FALSE(is_token) << "not the longest match at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace opal::test
