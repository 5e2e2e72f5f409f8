// A bounded load test on loopback: N concurrent streaming clients x M requests
// each (32 x 3 by default; 8 x 2 under AddressSanitizer; OPAL_SERVER_LOAD=NxM
// overrides). Every stream must be well formed and complete; zero errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "server/server_test_util.h"

namespace opal::test {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int kClients = 8, kRequests = 2;
#else
constexpr int kClients = 32, kRequests = 3;
#endif

TEST(ServerLoad, ConcurrentStreamingClients) {
  int clients = kClients, requests = kRequests;
  if (const char* env = std::getenv("OPAL_SERVER_LOAD")) std::sscanf(env, "%dx%d", &clients, &requests);
  LocalServer s(default_options(4, 4096));
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::string> errors(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (int r = 0; r < requests; ++r) {
        const bool chat = (c + r) % 2 == 0;
        const json body = chat ? json{{"messages", json::array({json{{"role", "user"}, {"content", "Story " + std::to_string(c)}}})},
                                      {"max_tokens", 16}, {"stream", true}, {"seed", c * 10 + r},
                                      {"stream_options", {{"include_usage", true}}}}
                               : json{{"prompt", "Once upon a time " + std::to_string(c)}, {"max_tokens", 16},
                                      {"stream", true}, {"seed", c * 10 + r}};
        const SseStream st = post_stream("127.0.0.1", s.port(), chat ? "/v1/chat/completions" : "/v1/completions", body, 120);
        std::string why;
        if (!st.well_formed) why = st.error;
        else if (!st.done_marker) why = "no [DONE]";
        else if (st.events.size() < 2) why = "too few events";
        else {
          const json& fin = chat ? st.events[st.events.size() - 2] : st.events.back();
          if (!fin["choices"][0]["finish_reason"].is_string()) why = "no finish_reason";
          if (chat && st.events.back()["usage"]["completion_tokens"].get<int>() > 16) why = "usage > max_tokens";
          for (const json& e : st.events)
            if (e.contains("error")) why = "error event: " + e.dump();
        }
        if (why.empty()) ++ok;
        else {
          ++failed;
          errors[size_t(c)] = why;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_EQ(ok.load(), clients * requests);
  const std::string m = s.get("/metrics")->body;
  EXPECT_EQ(metric_value(m, "opal:request_latency_seconds_count"), clients * requests);
  EXPECT_EQ(metric_value(m, "llamacpp:requests_processing"), 0);
}

}  // namespace
}  // namespace opal::test
