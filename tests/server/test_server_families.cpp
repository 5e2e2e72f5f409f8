// `opal serve` with the model families of issue 17, end to end on the tiny
// golden models: Gemma 3 with Gemma's chat template
// (../shared/chat-templates/gemma3-it through --chat-template-file: the tiny
// GGUFs carry no template), Gemma 4 (no template in the file nor in the shared
// set: the ChatML fallback) and RWKV-7 (one recurrent state per slot). Each:
// the rendered prompt equals the Jinja renderer's, the prompt is tokenized with
// the template's special tokens, a chat completion answers, streaming gives the
// same text, and a repeated request reuses the slot's prefix (KV cells, or a
// state checkpoint for RWKV) with the same greedy reply.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/gguf.h"
#include "server/server_test_util.h"
#include "support/test_support.h"
#include "tokenizer/jinja/chat.h"
#include "tokenizer/vocab.h"

namespace opal::test {
namespace {

json parse_ok(const httplib::Result& r) {
  EXPECT_TRUE(r) << "request failed";
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

server::ServerOptions family_options(const std::string& stem, const std::string& template_file = "") {
  server::ServerOptions o = default_options(2, 1024);
  o.model = golden_model(stem);
  o.alias = stem;
  o.chat_template_file = template_file;
  return o;
}

// The prompt text the template renders for `messages` (the model's own
// template, or `template_source` when given), and its tokens as the server
// tokenizes a chat prompt (BOS once).
struct Rendered {
  std::string text;
  std::vector<int32_t> tokens;
};
Rendered render(const std::string& stem, const json& messages, const std::string& template_source = "") {
  auto file = gguf::File::open(golden_model(stem));
  const std::string source = template_source.empty() ? jinja::chat_template_from_gguf(file).source : template_source;
  const jinja::SpecialTokenTexts sp = jinja::special_tokens_from_gguf(file);
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (sp.bos) vars["bos_token"] = *sp.bos;
  if (sp.eos) vars["eos_token"] = *sp.eos;
  Rendered r;
  r.text = jinja::apply_chat_template(source, nlohmann::ordered_json::parse(messages.dump()), true, vars);
  const Vocab vocab = Vocab::from_gguf(file);
  const bool has_bos = sp.bos && r.text.rfind(*sp.bos, 0) == 0;
  r.tokens = vocab.tokenize(r.text, !has_bos, true);
  return r;
}

// A chat completion (greedy, 8 tokens) non-streamed and streamed: both answer
// the same text, the usage counts the rendered prompt's tokens; a repeat
// answers the same, from the cached prefix where the cache keeps one (a KV
// cache; a recurrent state holds checkpoints only at the end of each prompt,
// so the repeat of a prompt re-evaluates it). Returns the first reply.
json chat_end_to_end(LocalServer& s, const json& messages, const Rendered& want, bool repeat_reuses = true) {
  const json req{{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
  const json a = parse_ok(s.post("/v1/chat/completions", req));
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_TRUE(a["choices"][0]["message"]["content"].is_string());
  const std::string reason = a["choices"][0]["finish_reason"].get<std::string>();
  EXPECT_TRUE(reason == "length" || reason == "stop") << reason;
  EXPECT_GT(a["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(a["usage"]["prompt_tokens"].get<size_t>(), want.tokens.size());
  json streamed = req;
  streamed["stream"] = true;
  const SseStream st = post_stream("127.0.0.1", s.port(), "/v1/chat/completions", streamed, 120);
  EXPECT_TRUE(st.well_formed) << st.error;
  EXPECT_TRUE(st.done_marker);
  EXPECT_EQ(chat_stream_text(st), a["choices"][0]["message"]["content"].get<std::string>());
  const json b = parse_ok(s.post("/v1/chat/completions", req));
  if (repeat_reuses) {
    EXPECT_GT(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << b.dump();
  }
  EXPECT_EQ(b["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"]);
  return a;
}

const json kHi = json::array({json{{"role", "user"}, {"content", "Hi"}}});

TEST(ServerFamilies, Gemma3ChatWithGemmaTemplate) {
  const std::string tmpl_path = shared_path("chat-templates/gemma3-it/template.jinja");
  LocalServer s(family_options("tiny-gemma3-q8_0", tmpl_path));
  const json props = parse_ok(s.get("/props"));
  EXPECT_FALSE(props["chat_template_is_fallback"].get<bool>());
  EXPECT_EQ(props["chat_template"], read_text(tmpl_path));

  const Rendered want = render("tiny-gemma3-q8_0", kHi, read_text(tmpl_path));
  EXPECT_EQ(want.text, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(parse_ok(s.post("/apply-template", {{"messages", kHi}}))["prompt"], want.text);
  // The turn markers are single special tokens, BOS once.
  auto file = gguf::File::open(golden_model("tiny-gemma3-q8_0"));
  const Vocab vocab = Vocab::from_gguf(file);
  ASSERT_FALSE(want.tokens.empty());
  EXPECT_EQ(want.tokens[0], vocab.bos());
  EXPECT_EQ(want.tokens[1], vocab.find_token("<start_of_turn>"));
  EXPECT_EQ(std::count(want.tokens.begin(), want.tokens.end(), vocab.bos()), 1);
  EXPECT_EQ(std::count(want.tokens.begin(), want.tokens.end(), vocab.find_token("<end_of_turn>")), 1);
  chat_end_to_end(s, kHi, want);
}

TEST(ServerFamilies, Gemma4ChatCompletion) {
  LocalServer s(family_options("tiny-gemma4-q8_0"));
  EXPECT_TRUE(parse_ok(s.get("/props"))["chat_template_is_fallback"].get<bool>());  // no template in the file
  const Rendered want = render("tiny-gemma4-q8_0", kHi);
  EXPECT_EQ(parse_ok(s.post("/apply-template", {{"messages", kHi}}))["prompt"], want.text);
  chat_end_to_end(s, kHi, want);
}

TEST(ServerFamilies, Rwkv7ChatStateInSlots) {
  LocalServer s(family_options("tiny-rwkv7-q8_0"));
  const Rendered want = render("tiny-rwkv7-q8_0", kHi);
  const json first = chat_end_to_end(s, kHi, want, false);
  // The next turn extends the conversation: the state checkpoint at the end of
  // the previous prompt is reused, and the reply equals a fresh evaluation's.
  json turn2 = kHi;
  turn2.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  turn2.push_back({{"role", "user"}, {"content", "More"}});
  const json req{{"messages", turn2}, {"max_tokens", 8}, {"temperature", 0}};
  const json cached = parse_ok(s.post("/v1/chat/completions", req));
  json fresh_req = req;
  fresh_req["cache_prompt"] = false;
  const json fresh = parse_ok(s.post("/v1/chat/completions", fresh_req));
  EXPECT_GT(cached["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << cached.dump();
  EXPECT_EQ(cached["choices"][0]["message"]["content"], fresh["choices"][0]["message"]["content"]);
  EXPECT_EQ(cached["usage"]["prompt_tokens"].get<size_t>(), render("tiny-rwkv7-q8_0", turn2).tokens.size());
}

TEST(ServerFamilies, UnreadableChatTemplateFileIsAnError) {
  server::ServerOptions o = family_options("tiny-gemma3-q8_0", temp_dir() + "/no-such-template.jinja");
  server::Server srv(o);
  srv.start();  // as `opal serve` does: listening while the model loads
  try {
    srv.load();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-template.jinja"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace opal::test
