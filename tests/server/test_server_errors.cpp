// Bad input gets a 400 with an OpenAI error object; keys are enforced; the
// server keeps serving afterwards.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/server_test_util.h"

namespace opal::test {
namespace {

class ServerErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new LocalServer(default_options(1, 256)); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static LocalServer& srv() { return *server_; }
  static LocalServer* server_;
};
LocalServer* ServerErrors::server_ = nullptr;

void expect_error(const httplib::Result& r, int status, const std::string& param = "") {
  ASSERT_TRUE(r) << "request failed";
  EXPECT_EQ(r->status, status) << r->body;
  json j;
  ASSERT_NO_THROW(j = json::parse(r->body)) << r->body;
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  if (status == 400) {
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  EXPECT_EQ(j["error"]["code"], status);
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << r->body;
  }
}

const json kMsgs = json::array({json{{"role", "user"}, {"content", "Hi"}}});

TEST_F(ServerErrors, MalformedJson) {
  auto c = srv().client();
  expect_error(c->Post("/v1/chat/completions", "{\"messages\": [", "application/json"), 400);
  expect_error(c->Post("/completion", "not json", "application/json"), 400);
  expect_error(c->Post("/v1/completions", "[1,2]", "application/json"), 400);
  expect_error(c->Post("/tokenize", "", "application/json"), 400);
}

TEST_F(ServerErrors, WrongTypes) {
  expect_error(srv().post("/v1/chat/completions", {{"messages", "Hi"}}), 400, "messages");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"max_tokens", "ten"}}), 400, "max_tokens");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"temperature", "hot"}}), 400, "temperature");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"stream", "yes"}}), 400, "stream");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"stop", 5}}), 400, "stop");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"seed", 1.5}}), 400, "seed");
  expect_error(
      srv().post("/v1/chat/completions", {{"messages", json::array({json{{"role", "wizard"}, {"content", "x"}}})}}),
      400, "messages[0].role");
  expect_error(
      srv().post("/v1/chat/completions", {{"messages", json::array({json{{"role", "user"}, {"content", 3}}})}}), 400,
      "messages[0].content");
  expect_error(srv().post("/v1/chat/completions", {{"messages", json::array()}}), 400, "messages");
  expect_error(srv().post("/v1/chat/completions", {{"max_tokens", 3}}), 400, "messages");
  expect_error(srv().post("/v1/completions", {{"prompt", json::object()}}), 400, "prompt");
  expect_error(srv().post("/v1/completions", {{"max_tokens", 3}}), 400, "prompt");
  expect_error(srv().post("/completion", {{"prompt", json::array({1, 2, 100000})}}), 400, "prompt");
  expect_error(srv().post("/detokenize", {{"tokens", json::array({-1})}}), 400, "tokens");
  expect_error(srv().post("/tokenize", {{"content", 12}}), 400, "content");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"top_p", 7.0}}), 400);
}

TEST_F(ServerErrors, UnsupportedFieldsThatMatter) {
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"n", 3}}), 400, "n");
  expect_error(
      srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"response_format", {{"type", "json_schema"}}}}), 400,
      "response_format");
  expect_error(
      srv().post("/v1/chat/completions",
                 {{"messages",
                   json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "image_url"}}})}}})}}),
      400, "messages[0].content");
  // unknown fields that do not matter are ignored, as OpenAI clients send many
  auto r =
      srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"max_tokens", 2}, {"user", "x"}, {"metadata", {}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(ServerErrors, PromptTooLongAndMaxTokensTooLarge) {
  std::string long_prompt;
  for (int i = 0; i < 200; ++i) long_prompt += "the dog and the cat ";
  expect_error(srv().post("/v1/completions", {{"prompt", long_prompt}}), 400, "prompt");
  expect_error(srv().post("/completion", {{"prompt", long_prompt}}), 400, "prompt");
  expect_error(srv().post("/v1/chat/completions",
                          {{"messages", json::array({json{{"role", "user"}, {"content", long_prompt}}})}}),
               400, "messages");
  expect_error(srv().post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1000}}), 400, "max_tokens");
  expect_error(srv().post("/v1/chat/completions", {{"messages", kMsgs}, {"max_tokens", 256}}), 400, "max_tokens");
  expect_error(srv().post("/completion", {{"prompt", "Hi"}, {"n_predict", 300}}), 400, "n_predict");
  // the largest allowed still works, and the context limit ends it with "length"
  auto r = srv().post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 250}, {"ignore_eos", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["finish_reason"], "length");
  // unlimited generation stops at the slot's context
  auto u = srv().post("/completion", {{"prompt", "Hi"}, {"ignore_eos", true}});
  ASSERT_TRUE(u);
  const json uj = json::parse(u->body);
  EXPECT_EQ(uj["stop_type"], "limit");
  EXPECT_LT(uj["tokens_cached"].get<int>(), 256);
}

TEST_F(ServerErrors, UnknownRouteIsJson404) {
  auto r = srv().get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
}

TEST_F(ServerErrors, StillServesAfterErrors) {
  auto r = srv().post("/completion", {{"prompt", "Once"}, {"n_predict", 3}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["tokens_predicted"], 3);
}

TEST(ServerAuth, ApiKey) {
  auto o = default_options();
  o.api_key = "sekret";
  LocalServer s(o);
  const json body{{"prompt", "Once"}, {"n_predict", 2}};
  expect_error(s.post("/completion", body), 401);
  expect_error(s.post("/completion", body, {{"Authorization", "Bearer wrong"}}), 401);
  expect_error(s.post("/v1/chat/completions", {{"messages", kMsgs}}, {{"Authorization", "sekret"}}), 401);
  expect_error(s.get("/metrics"), 401);
  auto ok = s.post("/completion", body, {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto h = s.get("/health");  // public
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = s.get("/v1/models");  // public, as in llama-server
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const auto r = s.post("/completion", body, {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
}

// A second server on a port already taken fails to start, naming the address,
// instead of sharing the port (SO_REUSEPORT) and splitting the traffic.
TEST(ServerStart, PortInUseIsAnError) {
  LocalServer first(default_options(1, 256));
  server::ServerOptions o = default_options(1, 256);
  o.port = first.port();
  server::Server second(o);
  try {
    second.start();
    ADD_FAILURE() << "a second server started on port " << first.port();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
  }
  second.shutdown();
  second.wait();
  EXPECT_EQ(first.get("/health")->status, 200);
}

}  // namespace
}  // namespace opal::test
