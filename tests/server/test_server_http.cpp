// The HTTP layer's limits and manners (server/http): header and body read
// deadlines, the connection cap (503 + Retry-After), 413 from Content-Length
// before the body is read (and for chunked bodies as they grow), CORS
// preflight, the Bearer scheme in any case, a client that stops reading a
// stream, keep-alive timeouts, and the connection counters in /metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "server/raw_socket.h"
#include "server/server_test_util.h"

namespace opal::test {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

server::ServerOptions short_deadlines() {
  server::ServerOptions o = default_options(2, 512);
  o.header_timeout_s = 1;
  o.body_timeout_s = 1;
  o.idle_timeout_s = 1;
  return o;
}

int status_of(const std::string& raw) {
  if (raw.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(raw.c_str() + 9);
}

std::string body_of(const std::string& raw) {
  const size_t p = raw.find("\r\n\r\n");
  return p == std::string::npos ? std::string() : raw.substr(p + 4);
}

TEST(ServerHttp, PartialRequestHeadIsCutAtTheHeaderDeadline) {
  LocalServer s(short_deadlines());
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, "GET /health HTTP/1.1\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  raw_read(fd, 5000, &closed);
  const double waited = seconds_since(t0);
  ::close(fd);
  EXPECT_TRUE(closed) << "the connection was still open after 5 s";
  EXPECT_LT(waited, 3.0);
  EXPECT_GE(metric_value(s.get("/metrics")->body, "opal:http_connections_timed_out_total"), 1);
  // An idle connection that never sends a byte is cut too.
  const int idle = raw_connect(s.port());
  ASSERT_GE(idle, 0);
  raw_read(idle, 5000, &closed);
  ::close(idle);
  EXPECT_TRUE(closed);
}

TEST(ServerHttp, SlowBodyIsCutAtTheBodyDeadline) {
  LocalServer s(short_deadlines());
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd,
                       "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 100\r\n\r\n{\"prompt\": \"Once"));
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 8 && !closed; ++i) {  // a trickle does not extend the deadline
    raw_send(fd, " ");
    raw_read(fd, 500, &closed);
  }
  const double waited = seconds_since(t0);
  ::close(fd);
  EXPECT_TRUE(closed) << "a trickling body kept the connection open past the deadline";
  EXPECT_LT(waited, 3.5);
}

TEST(ServerHttp, IdleKeepAliveConnectionIsClosed) {
  LocalServer s(short_deadlines());
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool closed = false;
  const std::string first = raw_read(fd, 2000, &closed, "\"ok\"}");
  EXPECT_EQ(status_of(first), 200) << first;
  EXPECT_FALSE(closed);
  // a second request on the same connection works (keep-alive) ...
  ASSERT_TRUE(raw_send(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(raw_read(fd, 2000, &closed, "\"ok\"}")), 200);
  // ... and then the idle connection is closed after the keep-alive timeout.
  const auto t0 = std::chrono::steady_clock::now();
  raw_read(fd, 5000, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(ServerHttp, ConnectionsOverTheCapGet503WithRetryAfter) {
  server::ServerOptions o = default_options(1, 256);
  o.max_connections = 4;
  LocalServer s(o);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(raw_connect(s.port()));
    ASSERT_GE(held.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted
  const int extra = raw_connect(s.port());
  ASSERT_GE(extra, 0);
  ASSERT_TRUE(raw_send(extra, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool closed = false;
  const std::string raw = raw_read(extra, 5000, &closed);
  ::close(extra);
  EXPECT_EQ(status_of(raw), 503) << raw;
  EXPECT_NE(raw.find("Retry-After: 1"), std::string::npos) << raw;
  const json err = json::parse(body_of(raw));
  EXPECT_EQ(err["error"]["code"], 503);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("--max-connections"), std::string::npos);
  EXPECT_TRUE(closed);
  for (int fd : held) ::close(fd);
  // Once they are gone, new clients are served again, and the refusal was counted.
  std::string metrics;
  for (int i = 0; i < 50; ++i) {
    auto r = s.get("/metrics");
    if (r && r->status == 200) {
      metrics = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(metrics.empty());
  EXPECT_GE(metric_value(metrics, "opal:http_connections_rejected_total"), 1);
  EXPECT_GE(metric_value(metrics, "opal:http_connections_open"), 1);  // this very request
}

TEST(ServerHttp, BodyOverTheLimitIs413FromContentLengthBeforeReadingIt) {
  server::ServerOptions o = default_options(1, 256);
  o.max_body_bytes = 1000;
  LocalServer s(o);
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  // The head announces 100 MB and not one byte of it is sent: the answer must come anyway.
  ASSERT_TRUE(raw_send(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 100000000\r\n\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string raw = raw_read(fd, 5000, nullptr, "}}");
  ::close(fd);
  EXPECT_LT(seconds_since(t0), 2.0);
  ASSERT_EQ(status_of(raw), 413) << raw;
  const std::string msg = json::parse(body_of(raw))["error"]["message"];
  EXPECT_NE(msg.find("100000000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1000 bytes"), std::string::npos) << msg;

  // A chunked body is counted as it arrives.
  const int fd2 = raw_connect(s.port());
  ASSERT_GE(fd2, 0);
  std::string chunked =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += "200\r\n" + std::string(512, ' ') + "\r\n";
  ASSERT_TRUE(raw_send(fd2, chunked));
  const std::string raw2 = raw_read(fd2, 5000, nullptr, "}}");
  ::close(fd2);
  ASSERT_EQ(status_of(raw2), 413) << raw2;
  EXPECT_NE(body_of(raw2).find("1000 bytes"), std::string::npos) << raw2;

  // Under the limit still works.
  auto ok = s.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_GE(metric_value(s.get("/metrics")->body, "opal:http_requests_too_large_total"), 2);
}

TEST(ServerHttp, CorsPreflightAndHeaders) {
  server::ServerOptions o = default_options(1, 256);
  o.api_key = "sekret";  // a preflight carries no key and must still pass
  LocalServer s(o);
  auto c = s.client();
  httplib::Headers h{{"Origin", "http://example.com"},
                     {"Access-Control-Request-Method", "POST"},
                     {"Access-Control-Request-Headers", "authorization, content-type"}};
  auto r = c->Options("/v1/chat/completions", h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://example.com");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Credentials"), "true");
  auto g = c->Get("/health", httplib::Headers{{"Origin", "http://example.com"}});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->get_header_value("Access-Control-Allow-Origin"), "http://example.com");
  auto n = c->Get("/health");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(ServerHttp, BearerSchemeInAnyCase) {
  server::ServerOptions o = default_options(1, 256);
  o.api_key = "sekret";
  LocalServer s(o);
  const json body{{"prompt", "Once"}, {"n_predict", 1}};
  for (const char* auth : {"Bearer sekret", "bearer sekret", "BEARER sekret", "bEaReR  sekret"}) {
    auto r = s.post("/completion", body, {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << auth << ": " << r->body;
  }
  for (const char* auth : {"bearer Sekret", "bearersekret", "Basic sekret", "bearer sekret2"}) {
    auto r = s.post("/completion", body, {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << auth;
  }
}

// A client that asks for a long stream and never reads it: other clients'
// streams and /health go on as if it were not there.
TEST(ServerHttp, StalledStreamReaderDoesNotBlockOthers) {
  server::ServerOptions o = default_options(2, 1024);
  o.timeout_s = 2;  // write deadline
  LocalServer s(o);
  const int fd = raw_connect(s.port(), 1024);
  ASSERT_GE(fd, 0);
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"n_predict", 500}, {"n_probs", 20}, {"ignore_eos", true}, {"stream", true}}
          .dump();
  ASSERT_TRUE(
      raw_send(fd, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    const SseStream st =
        post_stream("127.0.0.1", s.port(), "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 8}, {"stream", true}});
    ASSERT_TRUE(st.well_formed) << st.error;
    EXPECT_TRUE(st.done_marker);
    auto h = s.get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
  EXPECT_LT(seconds_since(t0), 10.0);
  ::close(fd);
}

// A client that disconnects in the middle of a stream frees its slot at once:
// with one slot, the next request is served.
TEST(ServerHttp, DisconnectedStreamFreesItsSlot) {
  LocalServer s(default_options(1, 4096));
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  const std::string body = json{{"prompt", "Once"}, {"n_predict", 4000}, {"ignore_eos", true}, {"stream", true}}.dump();
  ASSERT_TRUE(
      raw_send(fd, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string first = raw_read(fd, 5000, nullptr, "data: ");
  ASSERT_EQ(status_of(first), 200) << first;
  ::close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s.post("/completion", {{"prompt", "Once"}, {"n_predict", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(seconds_since(t0), 5.0) << "the abandoned stream kept the only slot";
}

// A client that disconnects while its NON-streamed request runs (a 2000-token
// completion, one slot) is noticed by the socket watch: the task is cancelled
// long before its end (the cancelled counter moves, far fewer than 2000 tokens
// were generated, nothing finished) and the slot serves the next request.
TEST(ServerHttp, DisconnectDuringNonStreamedRequestCancelsIt) {
  LocalServer s(default_options(1, 4096));
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  const std::string body = json{{"prompt", "Once"}, {"n_predict", 2000}, {"ignore_eos", true}}.dump();
  ASSERT_TRUE(
      raw_send(fd, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
  auto metric = [&](const char* name) { return metric_value(s.get("/metrics")->body, name); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && metric("opal:time_to_first_token_seconds_count") < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(fd);
  // The counters move one after the other (cancelled, then processing): wait for both.
  while (std::chrono::steady_clock::now() < deadline &&
         (metric("opal:requests_cancelled_total") < 1 || metric("llamacpp:requests_processing") != 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string m = s.get("/metrics")->body;
  EXPECT_EQ(metric_value(m, "opal:requests_cancelled_total"), 1) << m;
  EXPECT_EQ(metric_value(m, "opal:requests_finished_total"), 0) << m;
  EXPECT_EQ(metric_value(m, "llamacpp:requests_processing"), 0) << m;
  const double generated = metric_value(m, "llamacpp:tokens_predicted_total");  // the cancelled request's tokens
  EXPECT_GT(generated, 0) << m;
  EXPECT_LT(generated, 2000) << m;
  auto r = s.post("/completion", {{"prompt", "Once"}, {"n_predict", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerHttp, MalformedRequestLineIs400) {
  LocalServer s(short_deadlines());
  const int fd = raw_connect(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, "HELLO THERE\r\n\r\n"));
  bool closed = false;
  const std::string raw = raw_read(fd, 3000, &closed);
  ::close(fd);
  EXPECT_EQ(status_of(raw), 400) << raw;
  EXPECT_TRUE(closed);
}

}  // namespace
}  // namespace opal::test
