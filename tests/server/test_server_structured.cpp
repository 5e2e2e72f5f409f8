// Structured output end to end: the real `opal serve` binary driven by the
// official `openai` npm client (tests/server/node/structured_output.mjs):
// many JSON Schemas x seeds, every output validated with Ajv. In process: a
// grammar with no way on ends the request with finish_reason "grammar_error"
// and an error object, streamed and not, and the server goes on serving.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

TEST(ServeStructuredOutput, SchemasValidateWithOpenAiClientAndAjv) {
  const std::string dir = source_dir() + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/ajv/package.json"))
      << dir << "/node_modules/ajv is missing: run scripts/setup.sh (it runs `npm ci` there)";
  std::string version;
  ASSERT_EQ(run_command("node --version", &version), 0) << "node is not installed (scripts/setup.sh installs it)";
  ServeProcess p("-m " + stories_model() + " --np 2 -a stories --api-key test-key");
  ASSERT_TRUE(p.ready());
  std::string out;
  const int rc = run_command("cd " + dir + " && OPAL_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                                 "/v1 OPAL_API_KEY=test-key OPAL_MODEL=stories timeout 300 node structured_output.mjs",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

// Tool calls with the openai client (tests/server/node/tool_calls.mjs).
TEST(ServeStructuredOutput, ToolCallsWithOpenAiClient) {
  const std::string dir = source_dir() + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/ajv/package.json"))
      << dir << "/node_modules/ajv is missing: run scripts/setup.sh (it runs `npm ci` there)";
  ServeProcess p("-m " + stories_model() + " --np 2 -a stories --api-key test-key");
  ASSERT_TRUE(p.ready());
  std::string out;
  const int rc = run_command("cd " + dir + " && OPAL_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                                 "/v1 OPAL_API_KEY=test-key OPAL_MODEL=stories timeout 300 node tool_calls.mjs",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

// Bans (logit_bias false) every token whose text starts with 'Q', then asks for
// a grammar that must start with 'Q': the first step has no token left.
TEST(ServeStructuredOutput, GrammarDeadEndEndsTheRequestClearly) {
  LocalServer srv(default_options(1));
  json bias = json::array();
  for (int t = 0; t < 512; ++t) {
    auto r = srv.post("/detokenize", json{{"tokens", json::array({t})}});
    ASSERT_TRUE(r);
    const std::string piece = json::parse(r->body)["content"].get<std::string>();
    std::string trimmed = piece;
    while (!trimmed.empty() && trimmed[0] == ' ') trimmed.erase(0, 1);  // SPM's leading space
    if (!trimmed.empty() && trimmed[0] == 'Q') bias.push_back(json::array({t, false}));
  }
  ASSERT_FALSE(bias.empty());
  const json body{{"prompt", "Hi"}, {"max_tokens", 10}, {"logit_bias", bias}, {"grammar", "root ::= \"Q\" [a-z]*"}};
  auto r = srv.post("/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "grammar_error") << r->body;
  EXPECT_EQ(j["error"]["type"], "grammar_error") << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("grammar"), std::string::npos) << r->body;

  json sbody = body;
  sbody["stream"] = true;
  const SseStream st = post_stream("127.0.0.1", srv.port(), "/v1/completions", sbody);
  ASSERT_TRUE(st.well_formed) << st.error;
  ASSERT_FALSE(st.events.empty());
  EXPECT_TRUE(st.done_marker);
  EXPECT_EQ(st.events.back()["choices"][0]["finish_reason"], "grammar_error");

  auto n = srv.post("/completion",
                    json{{"prompt", "Hi"}, {"n_predict", 4}, {"logit_bias", bias}, {"grammar", "root ::= \"Q\""}});
  ASSERT_TRUE(n);
  EXPECT_EQ(json::parse(n->body)["stop_type"], "grammar") << n->body;

  // The server goes on: a normal request still works.
  auto ok = srv.post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 3}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// /v1/completions has no tool calls (OpenAI's legacy API has none; llama-server takes tools on chat only):
// a clear 400 naming the field, not a silently ignored one.
TEST(ServeStructuredOutput, ToolsOnLegacyCompletionsAreA400) {
  LocalServer srv(default_options(1));
  const json tools =
      json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  for (const char* k : {"tools", "tool_choice"}) {
    auto r = srv.post("/v1/completions", {{"prompt", "hi"}, {k, k == std::string("tools") ? tools : json("auto")}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], k);
    EXPECT_NE(e["message"].get<std::string>().find("/v1/chat/completions"), std::string::npos) << r->body;
  }
  auto ok = srv.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}});
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace opal::test
