// What a replica behind a load balancer needs (deploy/, docs/deploy.md): slot
// choice that keeps a conversation's prefix cache when unrelated requests share
// only a chat template's first tokens (--slot-prompt-similarity), and draining
// on SIGTERM (--drain-timeout): /health and new requests get 503 while the
// requests in flight run to their end. tests/deploy/test_haproxy.py runs three
// replicas behind HAProxy.
#include <signal.h>

#include <chrono>
#include <thread>

#include "server_test_util.h"

namespace opal::test {
namespace {

json chat_body(const json& messages, int max_tokens = 12) {
  return json{{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Turn 1 of conversation A, an unrelated request B before it (so A's slot is the
// most recently used), then C, which shares only the template head and "conv-"
// with A; returns how many of A's turn-2 prompt tokens came from the cache, and
// turn 1's prompt length.
std::pair<int64_t, int64_t> conversation_cache_after_unrelated_requests(float similarity) {
  auto opts = default_options(2);
  opts.slot_prompt_similarity = similarity;
  LocalServer srv(opts);
  const json b = json::array({{{"role", "user"}, {"content", "zzz unrelated words about a dog"}}});
  EXPECT_EQ(srv.post("/v1/chat/completions", chat_body(b))->status, 200);
  json a = json::array({{{"role", "user"}, {"content", "conv-1: once upon a time there was a cat."}}});
  auto r1 = srv.post("/v1/chat/completions", chat_body(a));
  EXPECT_EQ(r1->status, 200);
  const json j1 = json::parse(r1->body);
  const json c = json::array({{{"role", "user"}, {"content", "conv-2: a bird sang in the tree all day."}}});
  EXPECT_EQ(srv.post("/v1/chat/completions", chat_body(c))->status, 200);
  a.push_back({{"role", "assistant"}, {"content", j1["choices"][0]["message"]["content"]}});
  a.push_back({{"role", "user"}, {"content", "And then?"}});
  auto r2 = srv.post("/v1/chat/completions", chat_body(a));
  EXPECT_EQ(r2->status, 200);
  const json j2 = json::parse(r2->body);
  return {j2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
          j1["usage"]["prompt_tokens"].get<int64_t>()};
}

TEST(ServerDeploy, ShortSharedPrefixDoesNotEvictAConversationsCache) {
  // Default (0.5, llama-server's): C takes the least recently used slot (B's); A's survives.
  const auto [cached, turn1] = conversation_cache_after_unrelated_requests(0.5f);
  EXPECT_GE(cached, turn1) << "A's second turn should reuse all of its first turn's prompt";
  // 0 = the longest shared prefix wins: C takes A's slot for a few template tokens.
  const auto [cached0, turn1_0] = conversation_cache_after_unrelated_requests(0.0f);
  EXPECT_LT(cached0, turn1_0 / 2) << "with --sps 0 the unrelated request should have evicted A's cache";
}

TEST(ServerDeploy, SigtermDrainsInFlightRequestsThenExits) {
  // The drain allows 120 s: a sanitizer build (TSan) streams stories260K at ~40 tokens/s on a busy host.
  ServeProcess p("-m " + stories_model() + " -np 2 -c 4096 --metrics --drain-timeout 120");
  ASSERT_TRUE(p.ready()) << p.log();
  // A long stream in flight when SIGTERM arrives.
  SseStream stream;
  std::thread t([&] {
    stream = post_stream("127.0.0.1", p.port(), "/v1/chat/completions",
                         json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                              {"max_tokens", 1000},
                              {"ignore_eos", true},
                              {"stream", true},
                              {"stream_options", {{"include_usage", true}}}});
  });
  httplib::Client cli("127.0.0.1", p.port());
  // Until the stream has started: a SIGTERM before it is in flight rightly stops the server at once, so on a
  // loaded host this waits by the clock (not a count of polls), and fails rather than signal too early.
  bool started = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       !started && std::chrono::steady_clock::now() < until;) {
    auto m = cli.Get("/metrics");
    started = m && m->status == 200 && m->body.find("llamacpp:requests_processing 1") != std::string::npos;
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!started) t.join();
  ASSERT_TRUE(started) << "the stream never showed in /metrics\n" << p.log();
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  // Draining: /health says 503, a new request gets 503, the stream goes on.
  int health = 0;
  for (int i = 0; i < 100 && health != 503; ++i) {
    auto h = cli.Get("/health");
    health = h ? h->status : 0;
    if (health != 503) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(health, 503);
  auto fresh = cli.Post("/v1/chat/completions", chat_body(json::array({{{"role", "user"}, {"content", "Hi"}}})).dump(),
                        "application/json");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 503);
  EXPECT_NE(fresh->body.find("draining"), std::string::npos) << fresh->body;
  t.join();
  // The in-flight stream ran to its end, then the process exited cleanly.
  ASSERT_FALSE(stream.events.empty());
  std::string finish;
  int64_t completion_tokens = -1;
  for (const auto& e : stream.events) {
    if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["finish_reason"].is_string())
      finish = e["choices"][0]["finish_reason"];
    if (e.contains("usage") && e["usage"].is_object()) completion_tokens = e["usage"]["completion_tokens"];
  }
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(completion_tokens, 1000);
  EXPECT_TRUE(stream.done_marker);
  EXPECT_EQ(p.wait_exit(30), 0) << p.log();
  EXPECT_NE(p.log().find("draining"), std::string::npos) << p.log();
}

}  // namespace
}  // namespace opal::test
