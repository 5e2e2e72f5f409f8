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

std::string read_text(const std::string& path) {
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
    const std::string src = read_text(test::shared_path(std::string("chat-templates/") + name + "/template.jinja"));
    ASSERT_FALSE(src.empty()) << name;
    const std::string out = jinja::apply_chat_template(src, messages, true, json{{"tools", tools}});
    EXPECT_NE(out.find("get_weather"), std::string::npos) << name << out;
    EXPECT_NE(out.find("18 C"), std::string::npos) << name << out;
    EXPECT_NE(out.find("Paris"), std::string::npos) << name << out;
  }
}

}  // namespace
}  // namespace opal::server
