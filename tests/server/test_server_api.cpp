// The HTTP surface of `opal serve` on stories260K: every endpoint's shape,
// streaming, stop strings, limits, seeds, and agreement with the engine and the
// Jinja renderer used directly.
#include <gtest/gtest.h>

#include "backends/factory/backend_factory.h"
#include "models/model.h"
#include "runtime/context.h"
#include "sampling/sampler.h"
#include "server/server_test_util.h"
#include "tokenizer/jinja/chat.h"
#include "tokenizer/vocab.h"

namespace opal::test {
namespace {

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new LocalServer(default_options(2)); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static LocalServer& srv() { return *server_; }
  static LocalServer* server_;
};
LocalServer* ServerApi::server_ = nullptr;

json parse(const httplib::Result& r) {
  EXPECT_TRUE(r) << "request failed";
  if (!r) return json();
  return json::parse(r->body);
}

const json kHello = json::array({json{{"role", "user"}, {"content", "Tell me a story."}}});

TEST_F(ServerApi, HealthAndModels) {
  auto h = srv().get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = srv().get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const json j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["meta"]["n_vocab"], 512);
  EXPECT_EQ(j["data"][0]["meta"]["n_ctx_train"], 2048);
}

TEST_F(ServerApi, HealthIs503WhileLoading) {
  server::Server s(default_options());
  const int port = s.start();  // not loaded yet
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["error"]["message"], "Loading model");
  auto r = c.Post("/completion", R"({"prompt":"hi"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  s.load();
  h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  s.shutdown();
  s.wait();
}

TEST_F(ServerApi, ChatNonStreaming) {
  auto r = srv().post("/v1/chat/completions", {{"messages", kHello}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "stories");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_FALSE(j["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(j["timings"]["predicted_n"], 12);
  EXPECT_EQ(j["timings"]["prompt_n"].get<int>() + j["timings"]["cache_n"].get<int>(),
            j["usage"]["prompt_tokens"].get<int>());
}

TEST_F(ServerApi, ChatStreamingEqualsNonStreaming) {
  const json req{{"messages", kHello}, {"max_tokens", 16}, {"temperature", 0}};
  const json full = parse(srv().post("/v1/chat/completions", req));
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const SseStream s = post_stream("127.0.0.1", srv().port(), "/v1/chat/completions", sreq);
  ASSERT_TRUE(s.well_formed) << s.error;
  EXPECT_TRUE(s.done_marker);
  ASSERT_GE(s.events.size(), 4u);
  EXPECT_EQ(s.events.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(s.events.front()["choices"][0]["delta"]["role"], "assistant");
  // the chunk before the usage chunk ends the choice
  const json& last_choice = s.events[s.events.size() - 2];
  EXPECT_EQ(last_choice["choices"][0]["finish_reason"], "length");
  const json& usage = s.events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 16);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], full["usage"]["prompt_tokens"]);
  for (const json& e : s.events) EXPECT_EQ(e["id"], s.events.front()["id"]);
  EXPECT_EQ(chat_stream_text(s), full["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(ServerApi, StreamWithoutIncludeUsageHasNoUsageChunk) {
  const SseStream s = post_stream("127.0.0.1", srv().port(), "/v1/chat/completions",
                                  {{"messages", kHello}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_TRUE(s.well_formed) << s.error;
  EXPECT_TRUE(s.done_marker);
  for (const json& e : s.events) EXPECT_FALSE(e.contains("usage"));
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerApi, CompletionsLegacy) {
  const json req{{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}};
  const json j = parse(srv().post("/v1/completions", req));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);
  const std::string text = j["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  json sreq = req;
  sreq["stream"] = true;
  const SseStream s = post_stream("127.0.0.1", srv().port(), "/v1/completions", sreq);
  ASSERT_TRUE(s.well_formed) << s.error;
  EXPECT_TRUE(s.done_marker);
  EXPECT_EQ(s.events.front()["object"], "text_completion");
  EXPECT_EQ(chat_stream_text(s), text);
  // the native endpoint gives the same greedy text
  const json n =
      parse(srv().post("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 10}, {"temperature", 0}}));
  EXPECT_EQ(n["content"], text);
  EXPECT_EQ(n["stop"], true);
  EXPECT_EQ(n["stop_type"], "limit");
  EXPECT_EQ(n["tokens_predicted"], 10);
  EXPECT_EQ(n["tokens"].size(), 10u);
}

TEST_F(ServerApi, NativeCompletionStreamHasNoDoneMarker) {
  const SseStream s = post_stream("127.0.0.1", srv().port(), "/completion",
                                  {{"prompt", "Once upon a time"}, {"n_predict", 6}, {"stream", true}});
  ASSERT_TRUE(s.well_formed) << s.error;
  EXPECT_FALSE(s.done_marker);
  ASSERT_GE(s.events.size(), 2u);
  for (size_t i = 0; i + 1 < s.events.size(); ++i) EXPECT_EQ(s.events[i]["stop"], false);
  EXPECT_EQ(s.events.back()["stop"], true);
  EXPECT_EQ(s.events.back()["tokens_predicted"], 6);
  EXPECT_TRUE(s.events.back().contains("timings"));
}

// The server's greedy tokens equal a greedy loop over the engine itself.
TEST_F(ServerApi, GreedyMatchesEngine) {
  auto reg = make_registry({}, 1);
  auto model = Model::load(stories_model(), *reg);
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  ContextParams cp;
  cp.n_ctx = 256;
  Context ctx(*model, cp);
  const std::vector<int32_t> prompt = vocab.tokenize("Lily and Ben went to the park", true, true);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), 0, i + 1 == prompt.size());
  ctx.decode(b);
  SamplerParams sp;
  sp.temp = 0;
  Sampler sampler(sp, int32_t(ctx.n_vocab()));
  std::vector<int32_t> expect;
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < 20; ++i) {
    const int32_t t = sampler.sample(ctx.logits(ctx.n_outputs() - 1));
    if (vocab.is_eog(t)) break;
    expect.push_back(t);
    b.clear();
    b.add(t, pos++, 0, true);
    ctx.decode(b);
  }
  const json n = parse(srv().post(
      "/completion",
      {{"prompt", "Lily and Ben went to the park"}, {"n_predict", 20}, {"temperature", 0}, {"cache_prompt", false}}));
  EXPECT_EQ(n["tokens"].get<std::vector<int32_t>>(), expect);
}

TEST_F(ServerApi, TokenizeDetokenizeRoundTrip) {
  const std::string text = "Once upon a time, there was a little dog.";
  const json t = parse(srv().post("/tokenize", {{"content", text}}));
  ASSERT_TRUE(t["tokens"].is_array());
  auto model_file = gguf::File::open(stories_model());
  const Vocab vocab = Vocab::from_gguf(model_file);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), vocab.tokenize(text, false, true));
  const json d = parse(srv().post("/detokenize", {{"tokens", t["tokens"]}}));
  EXPECT_EQ(d["content"], text);
  const json with_bos = parse(srv().post("/tokenize", {{"content", text}, {"add_special", true}}));
  EXPECT_EQ(with_bos["tokens"][0], vocab.bos());
  const json pieces = parse(srv().post("/tokenize", {{"content", "a dog"}, {"with_pieces", true}}));
  std::string joined;
  for (const json& p : pieces["tokens"]) {
    EXPECT_TRUE(p["id"].is_number_integer());
    joined += p["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, " a dog");  // SPM adds the space prefix
}

TEST_F(ServerApi, ApplyTemplateEqualsJinjaRender) {
  const json messages =
      json::array({json{{"role", "system"}, {"content", "You are kind."}}, json{{"role", "user"}, {"content", "Hi!"}}});
  const json r = parse(srv().post("/apply-template", {{"messages", messages}}));
  auto file = gguf::File::open(stories_model());
  const jinja::ModelChatTemplate tmpl = jinja::chat_template_from_gguf(file);
  EXPECT_TRUE(tmpl.is_fallback);  // stories260K has no template: ChatML
  const jinja::SpecialTokenTexts sp = jinja::special_tokens_from_gguf(file);
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (sp.bos) vars["bos_token"] = *sp.bos;
  if (sp.eos) vars["eos_token"] = *sp.eos;
  const std::string expect =
      jinja::apply_chat_template(tmpl.source, nlohmann::ordered_json::parse(messages.dump()), true, vars);
  EXPECT_EQ(r["prompt"], expect);
  EXPECT_NE(expect.find("<|im_start|>user\nHi!<|im_end|>"), std::string::npos);
}

TEST_F(ServerApi, StopString) {
  const json base{{"prompt", "Once upon a time"}, {"n_predict", 40}, {"temperature", 0}};
  const std::string full = parse(srv().post("/completion", base))["content"];
  ASSERT_GT(full.size(), 30u);
  const std::string word = full.substr(15, 4);
  const size_t at = full.find(word);
  json req = base;
  req["stop"] = json::array({word});
  const json n = parse(srv().post("/completion", req));
  EXPECT_EQ(n["content"], full.substr(0, at));
  EXPECT_EQ(n["stop_type"], "word");
  EXPECT_EQ(n["stopping_word"], word);
  // OpenAI shape, streamed: the text stops before the word; finish_reason stop
  const SseStream s = post_stream(
      "127.0.0.1", srv().port(), "/v1/completions",
      {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", word}, {"stream", true}});
  ASSERT_TRUE(s.well_formed) << s.error;
  EXPECT_EQ(chat_stream_text(s), full.substr(0, at));
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerApi, SeedReproducibility) {
  auto sample = [&](int seed) {
    return parse(srv().post("/completion", {{"prompt", "Once upon a time"},
                                            {"n_predict", 24},
                                            {"temperature", 1.0},
                                            {"top_k", 0},
                                            {"top_p", 1.0},
                                            {"min_p", 0},
                                            {"seed", seed}}))["content"]
        .get<std::string>();
  };
  const std::string a = sample(42), b = sample(42);
  EXPECT_EQ(a, b);
  bool any_differs = false;
  for (int seed = 1; seed <= 4 && !any_differs; ++seed) any_differs = sample(seed) != a;
  EXPECT_TRUE(any_differs) << "five seeds gave the same 24 sampled tokens";
}

TEST_F(ServerApi, LogprobsChat) {
  const json j = parse(srv().post(
      "/v1/chat/completions",
      {{"messages", kHello}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}}));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (const json& e : content) {
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    // greedy: the chosen token is the most probable one
    EXPECT_EQ(e["token"], e["top_logprobs"][0]["token"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
  }
}

TEST_F(ServerApi, PrefixReuseGivesSameOutput) {
  const json req{{"prompt", "The little bird sang a song in the tall green tree every morning"},
                 {"n_predict", 16},
                 {"temperature", 0}};
  json fresh = req;
  fresh["cache_prompt"] = false;
  const json a = parse(srv().post("/completion", fresh));
  EXPECT_EQ(a["timings"]["cache_n"], 0);
  const json b = parse(srv().post("/completion", req));
  const json c = parse(srv().post("/completion", req));
  EXPECT_GT(c["timings"]["cache_n"].get<int>(), 0);
  EXPECT_GT(c["tokens_cached"].get<int>(), 0);
  EXPECT_LT(c["timings"]["prompt_n"].get<int>(), a["timings"]["prompt_n"].get<int>());
  EXPECT_EQ(a["content"], b["content"]);
  EXPECT_EQ(a["content"], c["content"]);
  // a longer prompt that shares the prefix reuses it too
  json longer = req;
  longer["prompt"] = req["prompt"].get<std::string>() + " and the sun";
  const json d = parse(srv().post("/completion", longer));
  json longer_fresh = longer;
  longer_fresh["cache_prompt"] = false;
  const json e = parse(srv().post("/completion", longer_fresh));
  EXPECT_GT(d["timings"]["cache_n"].get<int>(), 5);
  EXPECT_EQ(d["content"], e["content"]);
  // chat: the usage reports the cached tokens
  const json chat{{"messages", kHello}, {"max_tokens", 4}, {"temperature", 0}};
  const json c1 = parse(srv().post("/v1/chat/completions", chat));
  const json c2 = parse(srv().post("/v1/chat/completions", chat));
  EXPECT_GT(c2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(c1["choices"][0]["message"]["content"], c2["choices"][0]["message"]["content"]);
}

TEST_F(ServerApi, MetricsHistogramsMove) {
  auto m0 = srv().get("/metrics");
  ASSERT_TRUE(m0);
  ASSERT_EQ(m0->status, 200);
  const double ttft0 = metric_value(m0->body, "opal:time_to_first_token_seconds_count");
  const double tok0 = metric_value(m0->body, "llamacpp:tokens_predicted_total");
  parse(srv().post("/completion", {{"prompt", "Once"}, {"n_predict", 5}}));
  auto m1 = srv().get("/metrics");
  ASSERT_TRUE(m1);
  for (const char* h : {"opal:time_to_first_token_seconds", "opal:inter_token_latency_seconds",
                        "opal:request_latency_seconds", "opal:queue_wait_seconds"}) {
    EXPECT_NE(m1->body.find(std::string("# TYPE ") + h + " histogram"), std::string::npos) << h;
    EXPECT_NE(m1->body.find(std::string(h) + "_bucket{le=\"+Inf\"}"), std::string::npos) << h;
    EXPECT_GE(metric_value(m1->body, std::string(h) + "_count"), 1.0) << h;
    EXPECT_GE(metric_value(m1->body, std::string(h) + "_sum"), 0.0) << h;
  }
  EXPECT_EQ(metric_value(m1->body, "opal:time_to_first_token_seconds_count"), ttft0 + 1);
  EXPECT_EQ(metric_value(m1->body, "llamacpp:tokens_predicted_total"), tok0 + 5);
  EXPECT_GE(metric_value(m1->body, "opal:inter_token_latency_seconds_count"), 4.0);
  for (const char* c : {"llamacpp:prompt_tokens_total", "llamacpp:n_decode_total", "llamacpp:requests_processing",
                        "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode"})
    EXPECT_GE(metric_value(m1->body, c), 0.0) << c;
}

TEST(ServerMetrics, DisabledWithoutFlag) {
  auto o = default_options();
  o.metrics = false;
  LocalServer s(o);
  auto r = s.get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_supported_error");
}

}  // namespace
}  // namespace opal::test
