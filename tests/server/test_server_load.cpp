// A bounded load test on loopback: N concurrent streaming clients x M requests
// each (32 x 3 by default; 8 x 2 under AddressSanitizer; OPAL_SERVER_LOAD=NxM
// overrides). Every stream must be well formed and complete; zero errors.
// And a memory test: a real `opal serve` fed prompts of many different
// lengths keeps its resident set flat once warmed up (compute memory is
// reserved once, not per batch shape), and returns what large request bodies took.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int kClients = 8, kRequests = 2;
#else
constexpr int kClients = 32, kRequests = 3;
#endif

void run_load(LocalServer& s) {
  int clients = kClients, requests = kRequests;
  if (const char* env = std::getenv("OPAL_SERVER_LOAD")) std::sscanf(env, "%dx%d", &clients, &requests);
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::string> errors(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (int r = 0; r < requests; ++r) {
        const bool chat = (c + r) % 2 == 0;
        const json body =
            chat ? json{{"messages", json::array({json{{"role", "user"}, {"content", "Story " + std::to_string(c)}}})},
                        {"max_tokens", 16},
                        {"stream", true},
                        {"seed", c * 10 + r},
                        {"stream_options", {{"include_usage", true}}}}
                 : json{{"prompt", "Once upon a time " + std::to_string(c)},
                        {"max_tokens", 16},
                        {"stream", true},
                        {"seed", c * 10 + r}};
        const SseStream st =
            post_stream("127.0.0.1", s.port(), chat ? "/v1/chat/completions" : "/v1/completions", body, 120);
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

TEST(ServerLoad, ConcurrentStreamingClients) {
  LocalServer s(default_options(4, 4096));
  run_load(s);
}

// The same load on a recurrent model (RWKV-7): one state per slot, prefix
// reuse through state checkpoints instead of KV cells.
TEST(ServerLoad, ConcurrentStreamingClientsRecurrentModel) {
  server::ServerOptions o = default_options(4, 4096);
  o.model = golden_model("tiny-rwkv7-q8_0");
  o.alias = "rwkv7";
  LocalServer s(o);
  run_load(s);
}

// VmRSS of a process in KiB, from /proc/PID/status (-1 if unreadable).
long rss_kib(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// A prompt of about n words (each a distinct token count for the tokenizer).
std::string prompt_of(int n) {
  static const char* words[] = {"once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named", "lily"};
  std::string s;
  for (int i = 0; i < n; ++i) s += std::string(i ? " " : "") + words[i % 11];
  return s;
}

// Runs one completion per prompt length in [first, last] (step), `clients` at a time.
int run_lengths(int port, int first, int last, int step, int clients) {
  std::atomic<int> next{first}, failed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(120, 0);
      for (int n = next.fetch_add(step); n <= last; n = next.fetch_add(step)) {
        const json body{{"prompt", prompt_of(n)}, {"max_tokens", 3}, {"seed", n}};
        auto r = cli.Post("/v1/completions", body.dump(), "application/json");
        if (!r || r->status != 200) ++failed;
      }
    });
  for (auto& t : threads) t.join();
  return failed.load();
}

TEST(ServerLoad, RssFlatUnderMixedPromptLengths) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine and shadow memory make the resident set meaningless";
#endif
  // The default model (opal-kjv: 256-token context, so 4 slots of 256 here):
  // its batches need a few hundred KiB of compute memory each.
  ServeProcess p("-m " + source_dir() + "/models/opal-kjv.gguf --np 4 -c 1024 -t 1");
  ASSERT_TRUE(p.ready()) << p.log();
  constexpr int kLongest = 150;  // words: about 235 tokens, 4 at a time fill 512-token ubatches
  const long start = rss_kib(p.pid());
  ASSERT_GT(start, 0);
  // Warm-up: one pass of prompts of every length from 1 to kLongest words, 4
  // at a time: full ubatches, and the KV cache and HTTP workers in use.
  ASSERT_EQ(run_lengths(p.port(), 1, kLongest, 1, 4), 0);
  const long warm = rss_kib(p.pid());
  // Load: three more such passes. The slots' prompts interleave differently
  // each time, so batches keep coming in shapes (tokens x outputs) not seen before.
  for (int pass = 0; pass < 3; ++pass) ASSERT_EQ(run_lengths(p.port(), 1, kLongest, 1, 4), 0);
  const long after = rss_kib(p.pid());
  std::printf(
      "opal serve VmRSS: start %ld KiB, after warm-up (%d mixed-length requests) %ld KiB, after %d more "
      "%ld KiB (+%ld KiB)\n",
      start, kLongest, warm, 3 * kLongest, after, after - warm);
  EXPECT_LE(after - warm, 3072) << "resident memory grew with the number of distinct batch shapes";
}

// Large bodies one after another (each handled by some worker thread): the
// memory they took goes back to the system. With glibc's dynamic malloc
// thresholds each 8 MB request left 17-25 MB more resident in its thread's
// arena (20 -> 99 MB over five; 4 MB bodies: 24 -> 89 MB over four); opal serve
// fixes the thresholds (cmd_serve.cpp).
TEST(ServerLoad, RssFlatAfterLargeBodies) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine and shadow memory make the resident set meaningless";
#endif
  ServeProcess p("-m " + stories_model() + " --np 1 -c 2048 -t 1");
  ASSERT_TRUE(p.ready()) << p.log();
  std::string words;
  while (words.size() < (4u << 20)) words += "once upon a time there was a little girl named lily ";
  const std::string body = json{{"messages", {{{"role", "user"}, {"content", words}}}}, {"max_tokens", 4}}.dump();
  std::vector<long> rss;
  for (int i = 0; i < 4; ++i) {
    httplib::Client cli("127.0.0.1", p.port());  // a new connection each time
    cli.set_read_timeout(120, 0);
    auto r = cli.Post("/v1/chat/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);  // refused from its size, naming `messages`
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rss.push_back(rss_kib(p.pid()));
  }
  std::printf("opal serve VmRSS after each of four 4 MB bodies: %ld %ld %ld %ld KiB\n", rss[0], rss[1], rss[2], rss[3]);
  EXPECT_LE(rss[3] - rss[0], 8192) << "memory freed after large requests stays resident";
}

}  // namespace
}  // namespace opal::test
