// Tokenizers inside real model files, and edge cases of the Vocab API.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "support/test_support.h"
#include "tokenizer/vectors.h"

namespace opal::test {
namespace {

const Vocab& spm() { return load_vocab(shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf")); }
const Vocab& llama3() { return load_vocab(shared_path("tokenizer-vectors/ggml-vocab-llama-bpe.gguf")); }
const Vocab& qwen2() { return load_vocab(shared_path("tokenizer-vectors/ggml-vocab-qwen2.gguf")); }
const Vocab& bert() { return load_vocab(shared_path("tokenizer-vectors/ggml-vocab-bert-bge.gguf")); }

// llama.cpp's tokenization of story.txt by stories260K (golden/story.tokens.json).
TEST(TokenizerModels, Stories260KStory) {
  const auto golden = nlohmann::json::parse(read_file(shared_path("golden/story.tokens.json")));
  const Vocab& v = load_vocab(shared_path("models/stories260K.gguf"));
  const std::string text = read_file(shared_path("golden/story.txt"));
  const auto want = golden["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 577u);
  EXPECT_TRUE(golden["add_bos"].get<bool>());
  const auto got = v.tokenize(text, true, false);
  EXPECT_EQ(ids_to_string(got), ids_to_string(want));
  EXPECT_EQ(got.front(), v.bos());
  EXPECT_EQ(v.detokenize(got, true), " " + text) << "BOS removed keeps the prefix space, as llama.cpp";
  EXPECT_EQ(v.detokenize(v.tokenize(text, false, false)), text);
}

// llama-2-tiny-random.gguf carries the Llama-2 tokenizer: same tokens, scores, types
// and special ids as the llama-spm vocab, so it must tokenize the same.
TEST(TokenizerModels, TinyRandomEqualsLlamaSpm) {
  const Vocab& a = load_vocab(shared_path("models/llama-2-tiny-random.gguf"));
  const Vocab& b = spm();
  ASSERT_EQ(a.n_tokens(), b.n_tokens());
  for (int32_t id = 0; id < a.n_tokens(); ++id) {
    ASSERT_EQ(a.token_text(id), b.token_text(id)) << id;
    ASSERT_EQ(a.token_score(id), b.token_score(id)) << id;
    ASSERT_EQ(a.token_attr(id), b.token_attr(id)) << id;
  }
  EXPECT_EQ(a.bos(), b.bos());
  EXPECT_EQ(a.eos(), b.eos());
  EXPECT_EQ(a.unk(), b.unk());
  const auto cases = read_vectors(shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp"),
                                  shared_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf.out"));
  for (const auto& c : cases) EXPECT_EQ(a.tokenize(c.text, false, false), c.ids) << c.text;
}

TEST(TokenizerModels, MetadataFlags) {
  EXPECT_EQ(spm().type_name(), "SPM");
  EXPECT_TRUE(spm().add_bos());
  EXPECT_FALSE(spm().add_eos());
  EXPECT_EQ(spm().bos(), 1);
  EXPECT_EQ(spm().eos(), 2);
  EXPECT_EQ(spm().unk(), 0);
  EXPECT_EQ(spm().nl(), 13);  // <0x0A>
  EXPECT_EQ(llama3().type_name(), "BPE");
  EXPECT_EQ(llama3().bos(), 128000);
  EXPECT_EQ(llama3().eot(), 128009);
  EXPECT_TRUE(llama3().is_eog(128009));
  EXPECT_TRUE(llama3().is_eog(128001));
  EXPECT_TRUE(llama3().is_eog(128008));  // <|eom_id|>
  EXPECT_FALSE(llama3().is_eog(128000));
  EXPECT_TRUE(llama3().is_control(128006));
  EXPECT_EQ(llama3().pad(), 128004);
  EXPECT_EQ(qwen2().bos(), 151643);
  EXPECT_FALSE(qwen2().add_bos());
  EXPECT_TRUE(qwen2().is_eog(151645));  // <|im_end|>
  EXPECT_EQ(bert().type_name(), "WPM");
  EXPECT_EQ(bert().bos(), 101);
  EXPECT_EQ(bert().sep(), 102);
  EXPECT_EQ(bert().eos(), -1);
}

// Facts from PROVENANCE.md (checked there with llama-tokenize): "Hello world".
TEST(TokenizerModels, HelloWorldWithSpecials) {
  EXPECT_EQ(llama3().tokenize("Hello world", true, true), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(qwen2().tokenize("Hello world", true, true), (std::vector<int32_t>{9707, 1879}));
  const auto im = qwen2().tokenize("<|im_start|>user\nHi<|im_end|>", false, true);
  ASSERT_GE(im.size(), 4u);
  EXPECT_EQ(im.front(), 151644);
  EXPECT_EQ(im[1], 872);
  EXPECT_EQ(im[2], 198);
  EXPECT_EQ(im.back(), 151645);
  EXPECT_EQ(llama3().tokenize("<|start_header_id|><|eot_id|>", false, true), (std::vector<int32_t>{128006, 128009}));
}

TEST(TokenizerEdgeCases, EmptyText) {
  for (const Vocab* v : {&spm(), &llama3(), &qwen2(), &bert()}) {
    EXPECT_TRUE(v->tokenize("", false, false).empty()) << v->type_name();
    EXPECT_TRUE(v->tokenize("", false, true).empty()) << v->type_name();
    EXPECT_EQ(v->detokenize(std::vector<int32_t>{}), "");
  }
  EXPECT_EQ(spm().tokenize("", true, false), (std::vector<int32_t>{1}));
  EXPECT_EQ(llama3().tokenize("", true, false), (std::vector<int32_t>{128000}));
  EXPECT_EQ(bert().tokenize("", true, false), (std::vector<int32_t>{101, 102}));
}

TEST(TokenizerEdgeCases, InvalidUtf8) {
  const std::string bad[] = {"\xff",
                             "a\xc3",
                             "\xe2\x82",
                             "\xed\xa0\x80 x",
                             "\xf8\x88\x80\x80\x80",
                             "ok \x80\x80 ok",
                             std::string("nul\0byte", 8),
                             "\xf4\x90\x80\x80"};
  for (const auto& s : bad) {
    // SPM keeps the bytes: byte fallback gives them back exactly.
    const auto ids = spm().tokenize(s, false, false);
    EXPECT_EQ(spm().detokenize(ids), s);
    // BPE sees U+FFFD for each bad byte, as llama.cpp; it must not throw.
    for (const Vocab* v : {&llama3(), &qwen2(), &bert()}) {
      const auto t = v->tokenize(s, true, true);
      EXPECT_FALSE(t.empty());
      (void)v->detokenize(t);
    }
  }
  // One invalid byte -> U+FFFD (EF BF BD) in byte-level BPE.
  EXPECT_EQ(llama3().detokenize(llama3().tokenize("a\xffz", false, false)), "a\xEF\xBF\xBDz");
}

TEST(TokenizerEdgeCases, LoneSpecialTokens) {
  // parse_special on: the text of a control token is that token.
  EXPECT_EQ(llama3().tokenize("<|eot_id|>", false, true), (std::vector<int32_t>{128009}));
  EXPECT_EQ(spm().tokenize("</s>", false, true), (std::vector<int32_t>{2}));
  // parse_special off: plain text, several tokens, none of them the control token.
  const auto off = llama3().tokenize("<|eot_id|>", false, false);
  EXPECT_GT(off.size(), 1u);
  for (int32_t id : off) EXPECT_FALSE(llama3().is_control(id));
  EXPECT_EQ(llama3().detokenize(off), "<|eot_id|>");
  // Rendering: control tokens show only with unparse_special.
  EXPECT_EQ(llama3().detokenize(std::vector<int32_t>{128009}, false, true), "<|eot_id|>");
  EXPECT_EQ(llama3().detokenize(std::vector<int32_t>{128009}, false, false), "");
  EXPECT_EQ(llama3().token_to_piece(128009, false), "");
  // SPM: a space prefix is added after a special token, as llama.cpp does.
  auto hi = spm().tokenize("Hi", false, false);
  hi.insert(hi.begin(), 1);
  EXPECT_EQ(spm().tokenize("<s>Hi", false, true), hi);
  // remove_special drops the BOS the vocabulary adds.
  const auto with_bos = llama3().tokenize("Hello", true, false);
  EXPECT_EQ(llama3().detokenize(with_bos, true), "Hello");
  EXPECT_EQ(llama3().detokenize(with_bos, false), "<|begin_of_text|>Hello");
}

TEST(TokenizerEdgeCases, LongInputWithoutSpaces) {
  const std::string s(200000, 'a');
  for (const Vocab* v : {&spm(), &llama3(), &qwen2()}) {
    const auto ids = v->tokenize(s, false, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_LT(ids.size(), s.size());
    const std::string back = v->detokenize(ids);
    EXPECT_EQ(back, s) << v->type_name();
  }
  std::string cjk;
  for (int i = 0; i < 20000; ++i) cjk += "\xE4\xBD\xA0\xE5\xA5\xBD";  // 你好
  EXPECT_EQ(qwen2().detokenize(qwen2().tokenize(cjk, false, false)), cjk);
}

TEST(TokenizerEdgeCases, IdsOutOfRange) {
  const std::vector<int32_t> bad{1, 32000};
  try {
    (void)spm().detokenize(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32000"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)spm().detokenize(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW((void)spm().token_to_piece(99999), Error);
  EXPECT_THROW((void)spm().token_text(-5), Error);
  EXPECT_FALSE(spm().is_control(-1));
  EXPECT_FALSE(spm().is_eog(1 << 30));
}

// Builds a GGUF holding only tokenizer metadata from a good one, with one change.
Vocab vocab_with(const std::string& base, const std::function<void(gguf::Writer&)>& edit) {
  const gguf::File f = gguf::File::open(base);
  gguf::Writer w;
  w.copy_metadata(f);
  edit(w);
  const std::string path = temp_dir() + "/edited.gguf";
  w.write(path);
  return Vocab::from_gguf(gguf::File::open(path));
}

TEST(TokenizerEdgeCases, BadMetadataIsAClearError) {
  const std::string base = shared_path("tokenizer-vectors/ggml-vocab-gpt-2.gguf");
  auto expect_error = [&](const char* what, const std::function<void(gguf::Writer&)>& edit, const char* needle) {
    SCOPED_TRACE(what);
    test::expect_error([&] { (void)vocab_with(base, edit); }, needle);
  };
  expect_error(
      "no model", [](gguf::Writer& w) { w.remove("tokenizer.ggml.model"); }, "tokenizer.ggml.model");
  expect_error(
      "unknown model", [](gguf::Writer& w) { w.set("tokenizer.ggml.model", gguf::Value::from_string("zzz")); }, "zzz");
  expect_error(
      "unknown pre", [](gguf::Writer& w) { w.set("tokenizer.ggml.pre", gguf::Value::from_string("nope")); }, "nope");
  expect_error(
      "no tokens", [](gguf::Writer& w) { w.remove("tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens");
  expect_error(
      "no merges", [](gguf::Writer& w) { w.remove("tokenizer.ggml.merges"); }, "tokenizer.ggml.merges");
  expect_error(
      "short types",
      [](gguf::Writer& w) {
        w.set("tokenizer.ggml.token_type", gguf::Value::from_array(gguf::ValueType::I32, {gguf::Value::from_i32(1)}));
      },
      "tokenizer.ggml.token_type");
  expect_error(
      "bos out of range", [](gguf::Writer& w) { w.set("tokenizer.ggml.bos_token_id", gguf::Value::from_u32(999999)); },
      "999999");
  expect_error(
      "duplicate",
      [](gguf::Writer& w) {
        std::vector<gguf::Value> toks;
        for (int i = 0; i < 50257; ++i)
          toks.push_back(gguf::Value::from_string(i < 2 ? std::string("dup") : fmt::format("t{}", i)));
        w.set("tokenizer.ggml.tokens", gguf::Value::from_array(gguf::ValueType::STRING, std::move(toks)));
      },
      "duplicate");
  // A missing pre-tokenizer is "default", as in llama.cpp.
  EXPECT_EQ(vocab_with(base, [](gguf::Writer& w) { w.remove("tokenizer.ggml.pre"); }).pre_name(), "default");
}

// The Gemma vocabularies of the golden models (issue 17) tokenize the golden
// prompts (golden/prompts.json: a newline, and "é" with no piece of its own,
// so byte fallback) to llama.cpp's ids, BOS as the metadata says.
void expect_golden_prompt_tokens(const std::string& family, const std::string& stem) {
  const auto prompts = nlohmann::json::parse(read_file(shared_path("golden/prompts.json")));
  const auto golden = nlohmann::json::parse(read_file(shared_path("golden/logits/" + stem + ".json")));
  const Vocab& v = load_vocab(shared_path("golden/models/" + family + "-f32.gguf"));
  const std::string key = prompts.contains(stem) ? stem : family;
  const std::string text = prompts[key].get<std::string>();
  const auto want = golden["prompt_tokens"].get<std::vector<int32_t>>();
  const auto got = v.tokenize(text, true, false);
  EXPECT_EQ(ids_to_string(got), ids_to_string(want)) << stem;
  EXPECT_EQ(v.detokenize(got, true), text) << stem;
}

TEST(TokenizerModels, Gemma3GoldenPrompts) {
  const Vocab& v = load_vocab(shared_path("golden/models/tiny-gemma3-f32.gguf"));
  EXPECT_EQ(v.type_name(), "SPM");
  EXPECT_FALSE(v.add_space_prefix());
  EXPECT_EQ(v.bos(), 2);
  expect_golden_prompt_tokens("tiny-gemma3", "tiny-gemma3-f32");
  expect_golden_prompt_tokens("tiny-gemma3", "tiny-gemma3-f32-long");
}

// "gemma4": BPE over raw UTF-8 with "▁" spaces, the [^\n]+|[\n]+ pre-split and <0xXX> byte fallback; BOS
// is added even when a caller's file says not to.
TEST(TokenizerModels, Gemma4GoldenPrompts) {
  const Vocab& v = load_vocab(shared_path("golden/models/tiny-gemma4-f32.gguf"));
  EXPECT_EQ(v.type_name(), "BPE");
  EXPECT_TRUE(v.add_bos());
  EXPECT_EQ(v.bos(), 2);
  expect_golden_prompt_tokens("tiny-gemma4", "tiny-gemma4-f32");
  expect_golden_prompt_tokens("tiny-gemma4", "tiny-gemma4-f32-long");
  const auto ids = v.tokenize("caf\xC3\xA9", false, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(v.token_text(ids[ids.size() - 2]), "<0xC3>");
  EXPECT_EQ(v.token_text(ids.back()), "<0xA9>");
}

// Gemma 4's end of generation: <eos> and the end-of-turn token <turn|> (the
// chat format's "<|turn>model ... <turn|>"); the turn opener and the channel
// markers are not. Gemma 3's end of turn is <end_of_turn>.
TEST(TokenizerModels, GemmaEndOfTurnTokens) {
  const Vocab& v4 = load_vocab(shared_path("golden/models/tiny-gemma4-f32.gguf"));
  const int32_t end_turn = v4.find_token("<turn|>");
  ASSERT_GE(end_turn, 0);
  EXPECT_TRUE(v4.is_eog(end_turn));
  EXPECT_TRUE(v4.is_eog(v4.eos()));
  EXPECT_EQ(v4.eog_ids(), (std::vector<int32_t>{std::min(v4.eos(), end_turn), std::max(v4.eos(), end_turn)}));
  for (const char* t : {"<|turn>", "<|channel>", "<channel|>", "<bos>"}) {
    ASSERT_GE(v4.find_token(t), 0) << t;
    EXPECT_FALSE(v4.is_eog(v4.find_token(t))) << t;
  }
  EXPECT_EQ(v4.token_to_piece(end_turn, false), "");  // a control token: not printed as text
  const Vocab& v3 = load_vocab(shared_path("golden/models/tiny-gemma3-f32.gguf"));
  const int32_t eot = v3.find_token("<end_of_turn>");
  ASSERT_GE(eot, 0);
  EXPECT_TRUE(v3.is_eog(eot));
  EXPECT_EQ(v3.eot(), eot);
  EXPECT_FALSE(v3.is_eog(v3.find_token("<start_of_turn>")));
}

}  // namespace
}  // namespace opal::test
