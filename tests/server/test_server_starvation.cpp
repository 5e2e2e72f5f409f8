// Nobody can starve the server (issue #20): hundreds of idle connections, 64
// partial request lines (`GET / HTTP/1.1\r\n` and nothing more) and 64
// keep-alive clients sending one small request a second are all open at
// once; meanwhile a new client's /health and a small completion must each be
// answered in under a second. (The old thread-per-connection server fails
// this: the partial requests hold every HTTP thread for the read timeout.)
// Uses only the server's default options, so it runs against any version.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "server/raw_socket.h"
#include "server/server_test_util.h"

namespace opal::test {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kBoundS = 3.0;  // sanitizers slow the completion itself
#else
constexpr double kBoundS = 1.0;
#endif

double starvation_seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(ServerStarvation, IdlePartialAndKeepAliveClientsDoNotStarveOthers) {
  raise_fd_limit();
  LocalServer s(default_options(2, 512));
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) {  // idle: connected, nothing sent
    const int fd = raw_connect(s.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    fds.push_back(fd);
  }
  for (int i = 0; i < 64; ++i) {  // partial request lines
    const int fd = raw_connect(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(raw_send(fd, "GET / HTTP/1.1\r\n"));
    fds.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> keepalive_ok{0}, keepalive_failed{0};
  std::vector<std::thread> keepers;
  for (int i = 0; i < 64; ++i)
    keepers.emplace_back([&] {
      httplib::Client c("127.0.0.1", s.port());
      c.set_keep_alive(true);
      c.set_read_timeout(30, 0);
      while (!stop) {
        auto r = c.Get("/health");
        if (r && r->status == 200) ++keepalive_ok;
        else ++keepalive_failed;
        for (int k = 0; k < 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every load in place

  for (int round = 0; round < 3; ++round) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(5, 0);
    auto t0 = std::chrono::steady_clock::now();
    auto h = c.Get("/health");
    const double health_s = starvation_seconds_since(t0);
    ASSERT_TRUE(h) << "/health failed under load: " << httplib::to_string(h.error());
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(health_s, kBoundS) << "/health took " << health_s << " s";

    httplib::Client c2("127.0.0.1", s.port());
    c2.set_connection_timeout(5, 0);
    c2.set_read_timeout(5, 0);
    t0 = std::chrono::steady_clock::now();
    auto r = c2.Post("/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 4}}.dump(), "application/json");
    const double completion_s = starvation_seconds_since(t0);
    ASSERT_TRUE(r) << "a completion failed under load: " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_LT(completion_s, kBoundS) << "a 4-token completion took " << completion_s << " s";
    std::printf("under load: /health %.1f ms, 4-token completion %.1f ms\n", health_s * 1e3, completion_s * 1e3);
  }
  stop = true;
  for (auto& t : keepers) t.join();
  for (int fd : fds) ::close(fd);
  EXPECT_GT(keepalive_ok.load(), 64);
  EXPECT_EQ(keepalive_failed.load(), 0);
}

}  // namespace
}  // namespace opal::test
