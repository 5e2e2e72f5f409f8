// Work bounded before it is done, and honest endings (issue #20): numbers out
// of range and wrong types give a 400 naming the field; per-request caps on
// stop strings, logit_bias and n_probs; prompt text too long for a slot is
// refused before it is tokenized; requests cut by shutdown end with
// finish_reason "abort" (running) or a 503 (queued); the busy-slots metric
// counts each slot once per decode.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "core/error.h"

#include "server/server_test_util.h"

namespace opal::test {
namespace {

using Clock = std::chrono::steady_clock;

class ServerLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new LocalServer(default_options(1, 256)); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static LocalServer& srv() { return *server_; }
  static httplib::Result post_raw(const std::string& path, const std::string& body) {
    return srv().client()->Post(path.c_str(), body, "application/json");
  }
  static LocalServer* server_;
};
LocalServer* ServerLimits::server_ = nullptr;

const json kLimitMsgs = json::array({json{{"role", "user"}, {"content", "Hi"}}});

// The status, and the error's param ("" when null); fails the test on a non-JSON body.
void expect_400(const httplib::Result& r, const std::string& param) {
  ASSERT_TRUE(r) << "request failed";
  EXPECT_EQ(r->status, 400) << r->body;
  json j;
  ASSERT_NO_THROW(j = json::parse(r->body)) << r->body;
  ASSERT_TRUE(j.contains("error")) << r->body;
  ASSERT_TRUE(j["error"].contains("param")) << r->body;
  EXPECT_EQ(j["error"]["param"], param) << r->body;
  EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
}

TEST_F(ServerLimits, NumbersOutOfRangeName400TheField) {
  // 1e400 is beyond double: the JSON parser itself fails (was a 500 with the library's message)
  expect_400(post_raw("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1e400})"),
             "max_tokens");
  expect_400(post_raw("/completion", R"({"prompt":"Hi","temperature":-1e400})"), "temperature");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"max_tokens", 1e300}}), "max_tokens");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"max_tokens", -5}}), "max_tokens");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"max_tokens", 2.5}}), "max_tokens");
  expect_400(srv().post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1e10}}), "max_tokens");
  expect_400(srv().post("/completion", {{"prompt", "Hi"}, {"n_predict", -2}}), "n_predict");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"top_p", 7.0}}), "top_p");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"min_p", -0.5}}), "min_p");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"temperature", 1e30}}), "temperature");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"repeat_penalty", 0}}), "repeat_penalty");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"seed", -7}}), "seed");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"logit_bias", {{"5", 1e30}}}}),
             "logit_bias");
}

TEST_F(ServerLimits, WrongTypesName400TheField) {
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"response_format", "json_object"}}),
             "response_format");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"response_format", {{"type", 5}}}}),
             "response_format");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"tools", {{"type", "function"}}}}),
             "tools");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"tool_choice", 3}}), "tool_choice");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"stop", 5}}), "stop");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"logit_bias", "x"}}), "logit_bias");
  // accepted shapes still work
  auto r = srv().post("/v1/chat/completions", {{"messages", kLimitMsgs},
                                               {"max_tokens", 2},
                                               {"response_format", {{"type", "text"}}},
                                               {"tools", json::array()},
                                               {"tool_choice", "none"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(ServerLimits, PerRequestCaps) {
  json many_stops = json::array();
  for (int i = 0; i < 17; ++i) many_stops.push_back(std::string(size_t(i + 1), 's'));
  expect_400(srv().post("/v1/completions", {{"prompt", "Hi"}, {"stop", many_stops}}), "stop");
  expect_400(srv().post("/v1/completions", {{"prompt", "Hi"}, {"stop", std::string(257, 'x')}}), "stop");
  expect_400(srv().post("/v1/completions", {{"prompt", "Hi"}, {"stop", json::array({std::string(300, 'y')})}}), "stop");
  // more logit_bias entries than the vocabulary has tokens (stories260K: 512)
  json bias = json::array();
  for (int i = 0; i < 600; ++i) bias.push_back(json::array({i % 512, 1.0}));
  expect_400(srv().post("/completion", {{"prompt", "Hi"}, {"logit_bias", bias}}), "logit_bias");
  expect_400(srv().post("/completion", {{"prompt", "Hi"}, {"n_probs", 101}}), "n_probs");
  expect_400(srv().post("/v1/chat/completions", {{"messages", kLimitMsgs}, {"logprobs", true}, {"top_logprobs", 21}}),
             "top_logprobs");
  expect_400(srv().post("/v1/completions", {{"prompt", "Hi"}, {"logprobs", 21}}), "logprobs");
  // at the caps it works; repeated logit_bias tokens add up (two halves of a ban still ban)
  json stops = json::array();
  for (int i = 0; i < 16; ++i) stops.push_back(std::string(256, char('a' + i)));
  auto ok = srv().post("/completion", {{"prompt", "Once"}, {"n_predict", 4}, {"stop", stops}, {"n_probs", 100}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto first = srv().post("/completion", {{"prompt", "Once"}, {"n_predict", 1}, {"temperature", 0}});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const int greedy = json::parse(first->body)["tokens"][0];
  auto banned = srv().post(
      "/completion", {{"prompt", "Once"},
                      {"n_predict", 1},
                      {"temperature", 0},
                      {"logit_bias", json::array({json::array({greedy, -500.0}), json::array({greedy, -500.0})})}});
  ASSERT_TRUE(banned);
  ASSERT_EQ(banned->status, 200) << banned->body;
  EXPECT_NE(json::parse(banned->body)["tokens"][0], greedy);
}

// Text that cannot fit a slot is refused from its size, before tokenizing it
// (a 50 MB chat body took 17 s and 1.6 GB when it was tokenized in full).
TEST_F(ServerLimits, HugePromptRefusedBeforeTokenizing) {
  const std::string big(2 << 20, 'a');  // 2 MB: far beyond what a slot of 256 tokens can hold
  const auto t0 = Clock::now();
  auto r = srv().post("/v1/chat/completions",
                      {{"messages", json::array({json{{"role", "user"}, {"content", big}}})}, {"max_tokens", 1}});
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  expect_400(r, "messages");
  EXPECT_NE(r->body.find("bytes"), std::string::npos) << r->body;
  EXPECT_LT(s, 10.0);
  expect_400(srv().post("/v1/completions", {{"prompt", big}}), "prompt");
  expect_400(srv().post("/completion", {{"prompt", json::array({"Hi", big})}}), "prompt");
}

// One request alone: each decode has one busy slot (the decode that ends the
// prompt used to count that slot twice).
TEST(ServerMetrics, BusySlotsPerDecodeCountsEachSlotOnce) {
  LocalServer s(default_options(2, 512));
  auto r = s.post("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 4}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string m = s.get("/metrics")->body;
  EXPECT_DOUBLE_EQ(metric_value(m, "llamacpp:n_busy_slots_per_decode"), 1.0) << m;
}

// SIGTERM-style shutdown with one request running and one queued (one slot):
// the running one returns what it generated with finish_reason "abort" and
// matching usage; the queued one gets a 503, not a 200 with empty text.
TEST(ServerEndings, ShutdownAbortsRunningAnd503sQueued) {
  auto s = std::make_unique<LocalServer>(default_options(1, 2048));
  const json body{{"prompt", "Once upon a time"}, {"max_tokens", 2000}, {"ignore_eos", true}};
  struct Reply {
    int status = 0;
    std::string body;
  };
  auto post = [&](Reply& out) {
    auto r = s->post("/v1/completions", body);
    if (r) out = {r->status, r->body};
  };
  Reply running, queued;
  std::thread a([&] { post(running); });
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline &&
         metric_value(s->get("/metrics")->body, "opal:time_to_first_token_seconds_count") < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread b([&] { post(queued); });
  while (Clock::now() < deadline && metric_value(s->get("/metrics")->body, "llamacpp:requests_deferred") < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  s->server().shutdown();
  a.join();
  b.join();
  ASSERT_EQ(running.status, 200) << running.body;
  const json j = json::parse(running.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "abort") << running.body;
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 2000);
  EXPECT_EQ(queued.status, 503) << queued.body;
  ASSERT_FALSE(queued.body.empty());
  const json q = json::parse(queued.body);
  EXPECT_EQ(q["error"]["code"], 503);
  EXPECT_EQ(q["usage"]["completion_tokens"], 0) << queued.body;  // never started, but its usage is there
  EXPECT_GT(q["usage"]["prompt_tokens"].get<int>(), 0) << queued.body;
}

// A decode that fails (injected through ServerOptions::before_decode at the
// 6th batched decode: the prompt, then 4 generated tokens' decodes succeed,
// so 5 tokens were sampled) ends the running request with a 500 error object
// that carries the usage: 5 completion tokens. The server goes on serving.
TEST(ServerEndings, FailedDecodeErrorCarriesUsage) {
  server::ServerOptions o = default_options(1, 512);
  auto n_decodes = std::make_shared<std::atomic<int>>(0);
  auto fail_at = std::make_shared<std::atomic<int>>(6);
  o.before_decode = [n_decodes, fail_at] {
    if (++*n_decodes == fail_at->load()) throw Error("injected decode failure");
  };
  LocalServer s(o);
  auto r = s.post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 50}, {"ignore_eos", true}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "server_error") << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("injected decode failure"), std::string::npos) << r->body;
  EXPECT_EQ(j["usage"]["completion_tokens"], 5) << r->body;
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0) << r->body;
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());

  // Streamed: the tokens sent before the failure, then an error event with the same usage, then [DONE].
  *n_decodes = 0;
  const SseStream st = post_stream("127.0.0.1", s.port(), "/v1/chat/completions",
                                   {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                                    {"max_tokens", 50},
                                    {"ignore_eos", true},
                                    {"stream", true}});
  ASSERT_TRUE(st.well_formed) << st.error;
  EXPECT_TRUE(st.done_marker);
  ASSERT_FALSE(st.events.empty());
  const json& last = st.events.back();
  ASSERT_TRUE(last.contains("error")) << last.dump();
  EXPECT_EQ(last["error"]["code"], 500);
  EXPECT_EQ(last["usage"]["completion_tokens"], 5) << last.dump();
  for (size_t i = 0; i + 1 < st.events.size(); ++i) EXPECT_FALSE(st.events[i].contains("error"));

  // The failed batch left the server usable.
  *fail_at = -1;
  auto ok = s.post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// `opal serve -np 8` on the default model (256 tokens of training context):
// 32 tokens per slot is warned, with the numbers and the fix.
TEST(ServeWarnings, SmallSlotContextIsWarned) {
  ServeProcess p("--np 8");
  ASSERT_TRUE(p.ready()) << p.log();
  EXPECT_NE(p.log().find("leaves 32 tokens per slot"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("-np 1"), std::string::npos) << p.log();
}

}  // namespace
}  // namespace opal::test
