// Tool-call parsing (Hermes, Mistral, Llama 3.x, failures kept as content),
// the forced-call grammar, and tools rendered through the shared Qwen3 and
// Llama 3.1 templates with a tool call fed back.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "sampling/grammar.h"
#include "server/tool_calls.h"
#include "support/test_support.h"
#include "tokenizer/jinja/chat.h"

namespace opal::server {
namespace {

TEST(ToolCalls, ParsesHermesMistralLlama) {
  auto h = parse_tool_calls(
      "Let me check.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.calls[0]["function"]["name"], "f");
  EXPECT_EQ(h.calls[0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(h.calls[1]["function"]["name"], "g");
  EXPECT_EQ(h.content, "Let me check.");
  EXPECT_TRUE(h.error.empty());

  auto m = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}]");
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0]["function"]["arguments"], "{\"a\":\"b\"}");

  auto l = parse_tool_calls("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": 2}}");
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0]["function"]["arguments"], "{\"q\":2}");
  auto bare = parse_tool_calls(" {\"name\": \"f\", \"parameters\": {}} ");
  ASSERT_EQ(bare.calls.size(), 1u);

  auto plain = parse_tool_calls("Just text {not a call}");
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_TRUE(plain.error.empty());
  EXPECT_EQ(plain.content, "Just text {not a call}");

  auto broken = parse_tool_calls("<tool_call>{\"name\": \"f\", \"argu");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_FALSE(broken.error.empty());
  EXPECT_EQ(broken.content, "<tool_call>{\"name\": \"f\", \"argu");  // kept, never dropped
}

TEST(ToolCalls, ForcedGrammarAcceptsOnlyValidCalls) {
  json body{{"tools", json::array({json{{"type", "function"},
                                        {"function",
                                         {{"name", "add"},
                                          {"parameters",
                                           {{"type", "object"},
                                            {"properties", {{"a", {{"type", "integer"}}}}},
                                            {"required", json::array({"a"})}}}}}}})},
            {"tool_choice", "required"},
            {"parallel_tool_calls", false}};
  const ToolRequest req = read_tools(body);
  auto g = Grammar::parse(tool_call_gbnf(req));
  EXPECT_TRUE(grammar_matches(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>"));
  EXPECT_FALSE(grammar_matches(g, "<tool_call>\n{\"name\": \"sub\", \"arguments\": {\"a\": 3}}\n</tool_call>"));
  EXPECT_FALSE(grammar_matches(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"3\"}}\n</tool_call>"));
  EXPECT_FALSE(grammar_matches(g,
                               "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>"));
  body["tool_choice"] = "auto";
  EXPECT_EQ(tool_call_gbnf(read_tools(body)), "");
}

std::string read_tool_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCalls, SharedTemplatesRenderToolsAndResults) {
  const json tools =
      json::array({json{{"type", "function"},
                        {"function",
                         {{"name", "get_weather"},
                          {"description", "Weather"},
                          {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  const json messages = json::array(
      {json{{"role", "user"}, {"content", "Weather in Paris?"}},
       json{{"role", "assistant"},
            {"content", ""},
            {"tool_calls",
             json::array({json{{"id", "call_1"},
                               {"type", "function"},
                               {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}})}},
       json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}}});
  for (const char* name : {"qwen3", "llama3.1-instruct"}) {
    const std::string src =
        read_tool_text(test::shared_path(std::string("chat-templates/") + name + "/template.jinja"));
    ASSERT_FALSE(src.empty()) << name;
    const std::string out = jinja::apply_chat_template(src, messages, true, json{{"tools", tools}});
    EXPECT_NE(out.find("get_weather"), std::string::npos) << name << out;
    EXPECT_NE(out.find("18 C"), std::string::npos) << name << out;
    EXPECT_NE(out.find("Paris"), std::string::npos) << name << out;
  }
}

// Forced calls in the model's own form: the format read from each shared template, and the grammar of
// each format accepting that form (which parse_tool_calls reads) and refusing the Hermes one.
TEST(ToolCalls, ForcedCallsInTheTemplatesOwnFormat) {
  const std::pair<const char*, ToolFormat> cases[] = {{"qwen3", ToolFormat::Hermes},
                                                      {"mistral-instruct-v0.3", ToolFormat::Mistral},
                                                      {"llama3.1-instruct", ToolFormat::Llama},
                                                      {"llama3.2-instruct", ToolFormat::Llama},
                                                      {"smollm2-instruct", ToolFormat::Hermes}};
  for (const auto& [name, want] : cases) {
    const std::string src =
        read_tool_text(test::shared_path(std::string("chat-templates/") + name + "/template.jinja"));
    EXPECT_EQ(int(tool_format_of_template(src)), int(want)) << name;
  }
  json body{{"tools", json::array({json{{"type", "function"},
                                        {"function",
                                         {{"name", "add"},
                                          {"parameters",
                                           {{"type", "object"},
                                            {"properties", {{"a", {{"type", "integer"}}}}},
                                            {"required", json::array({"a"})}}}}}}})},
            {"tool_choice", "required"}};
  ToolRequest req = read_tools(body);
  const std::string hermes = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>";
  const std::string mistral = "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 3}}]";
  const std::string mistral2 =
      "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 3}}, {\"name\": \"add\", \"arguments\": {\"a\": 4}}]";
  const std::string llama = "{\"name\": \"add\", \"parameters\": {\"a\": 3}}";
  req.format = ToolFormat::Mistral;
  auto g = Grammar::parse(tool_call_gbnf(req));
  EXPECT_TRUE(grammar_matches(g, mistral));
  EXPECT_TRUE(grammar_matches(g, mistral2));
  EXPECT_FALSE(grammar_matches(g, hermes));
  req.format = ToolFormat::Llama;
  g = Grammar::parse(tool_call_gbnf(req));
  EXPECT_TRUE(grammar_matches(g, llama));
  EXPECT_FALSE(grammar_matches(g, "{\"name\": \"add\", \"arguments\": {\"a\": 3}}"));
  EXPECT_FALSE(grammar_matches(g, hermes));
  EXPECT_EQ(tool_call_lazy_gbnf(req), "") << "the lazy grammar's trigger is Hermes only";
  for (const std::string& text : {mistral, mistral2, llama}) {
    const ParsedToolCalls p = parse_tool_calls(text);
    ASSERT_FALSE(p.calls.empty()) << text;
    EXPECT_EQ(p.calls[0]["function"]["name"], "add");
    EXPECT_EQ(json::parse(p.calls[0]["function"]["arguments"].get<std::string>())["a"], 3);
  }
}

}  // namespace
}  // namespace opal::server

namespace opal::server {
namespace {

// Feeds a reply a few bytes at a time, as the engine releases it; returns every delta.
std::vector<json> stream_reply(ToolCallStream& s, const std::string& reply, size_t step = 3) {
  std::vector<json> out;
  for (size_t i = 0; i < reply.size(); i += step)
    for (json& d : s.feed(reply.substr(i, step))) out.push_back(std::move(d));
  for (json& d : s.finish()) out.push_back(std::move(d));
  return out;
}

TEST(ToolCallStream, HermesArgumentsStreamAsGenerated) {
  ToolCallStream s;
  const std::string args0 = R"({"city": "Paris", "unit": "c"})", args1 = R"({"a": 1, "b": {"c": [2, 3]}})";
  const auto d = stream_reply(s, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args0 +
                                     "}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": " + args1 +
                                     "}\n</tool_call>");
  EXPECT_EQ(s.n_calls(), 2);
  EXPECT_EQ(s.error(), "");
  std::string content, args[2];
  int fragments[2] = {0, 0}, heads = 0;
  for (const json& x : d) {
    if (x.contains("content")) {
      content += x["content"].get<std::string>();
      continue;
    }
    const json& tc = x["tool_calls"][0];
    const int i = tc["index"];
    ASSERT_TRUE(i == 0 || i == 1);
    if (tc.contains("id")) {  // the first chunk of a call: id, type, name
      ++heads;
      EXPECT_EQ(tc["type"], "function");
      EXPECT_EQ(tc["function"]["name"], i == 0 ? "get_weather" : "add");
      EXPECT_TRUE(tc["id"].get<std::string>().starts_with("call_"));
      EXPECT_EQ(args[i], "") << "the name comes before any argument";
    }
    args[i] += tc["function"]["arguments"].get<std::string>();
    fragments[i] += !tc["function"]["arguments"].get<std::string>().empty();
  }
  EXPECT_EQ(heads, 2);
  EXPECT_EQ(content, "Let me check.\n");
  EXPECT_EQ(args[0], args0);
  EXPECT_EQ(args[1], args1);
  EXPECT_GT(fragments[0], 3) << "arguments should arrive in several fragments, as generated";
  EXPECT_GT(fragments[1], 3);
}

TEST(ToolCallStream, OtherFormatsAndBrokenCalls) {
  {  // Mistral: held, then whole
    ToolCallStream s;
    const auto d = stream_reply(s, R"([TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}])");
    ASSERT_EQ(s.n_calls(), 1);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0]["tool_calls"][0]["function"]["arguments"], R"({"a":1,"b":2})");
  }
  {  // a bare JSON call (Llama 3.x)
    ToolCallStream s;
    const auto d = stream_reply(s, R"( {"name": "add", "parameters": {"a": 1}})");
    EXPECT_EQ(s.n_calls(), 1);
    EXPECT_EQ(d.back()["tool_calls"][0]["function"]["name"], "add");
  }
  {  // keys in another order: sent whole at the end
    ToolCallStream s;
    const auto d = stream_reply(s, "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"add\"}</tool_call>");
    EXPECT_EQ(s.n_calls(), 1);
    EXPECT_EQ(d.back()["tool_calls"][0]["function"]["name"], "add");
  }
  {  // arguments that are not JSON: content plus an error, never dropped
    ToolCallStream s;
    const auto d = stream_reply(s, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": oops}}</tool_call>");
    EXPECT_EQ(s.n_calls(), 0);
    EXPECT_NE(s.error(), "");
    EXPECT_NE(d.back()["content"].get<std::string>().find("oops"), std::string::npos);
  }
  {  // plain text with a '<' that is no marker
    ToolCallStream s;
    std::string text;
    for (const json& x : stream_reply(s, "1 < 2 and <tool is not a call", 1)) text += x["content"].get<std::string>();
    EXPECT_EQ(text, "1 < 2 and <tool is not a call");
    EXPECT_EQ(s.n_calls(), 0);
  }
}

}  // namespace
}  // namespace opal::server
