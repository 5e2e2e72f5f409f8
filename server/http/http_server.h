// The HTTP layer of `opal serve`: an event-driven HTTP/1.1 server on
// Boost.Beast / Boost.Asio (the parser and serializer are Beast's).
//
//   HttpServer http;
//   http.Get("/health", handler, Dispatch::Inline);   // cheap: runs on an I/O thread
//   http.Post("/v1/completions", handler);             // may block: runs on a worker
//   int port = http.bind(opts);                        // throws opal::Error when the port is taken
//   http.start();  ...  http.stop();
//
// Threads: a few I/O threads (opts.io_threads) run every socket; a connection
// costs no thread while it is idle, reading, or streaming. Handlers that may
// block (JSON parsing, tokenizing, waiting for a non-streamed completion) run
// on a fixed pool of worker threads (opts.workers) and hold one only while
// they run. A streamed response (HttpResponse::stream) is pumped on the I/O
// threads whenever its BodySource says it has more: one write in flight per
// connection (backpressure), each under a deadline.
//
// Limits (HttpOptions): a cap on open connections (beyond it: 503 with a JSON
// error body and Retry-After, then close); the request head must arrive within
// header_timeout_s of the connection (or of its first byte after keep-alive);
// the body within body_timeout_s of the head; an idle keep-alive connection is
// closed after idle_timeout_s; a body larger than max_body_bytes is refused
// with 413 from its Content-Length before any of it is read (chunked bodies
// are counted as they arrive); each write must finish within write_timeout_s.
// Every response carries CORS headers; OPTIONS is answered with 204.
// While a Worker handler runs, the socket is watched: a client that closes
// the connection is reported through HttpRequest::client (the handler cancels
// its work) and the connection is closed without an answer.
// Details and defaults: docs/server.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opal::server {

// Whether a request's client is still connected. The HTTP layer calls
// set_gone() (on an I/O thread) when the client closes the connection while
// a Worker handler runs; the handler registers what to do then.
class ClientWatch {
 public:
  // Runs `f` when the client goes away (now, on this thread, if it already
  // has). One callback at a time; null removes it.
  void on_gone(std::function<void()> f);
  bool gone() const;
  void set_gone();

 private:
  mutable std::mutex mu_;
  bool gone_ = false;
  std::function<void()> f_;
};

// One parsed request. Header names compare case-insensitively.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::shared_ptr<ClientWatch> client = std::make_shared<ClientWatch>();
  // The first header named `name` (any case), or "" when absent.
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// A response body produced over time (server-sent events). The HTTP layer
// calls set_wakeup once, then pull() on an I/O thread after each wakeup (and
// once at the start); pull() must not block.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // `wake` may be called from any thread, any number of times, when pull() may have more.
  virtual void set_wakeup(std::function<void()> wake) = 0;
  // The bytes ready now (possibly none); sets *done when nothing more will follow.
  virtual std::string pull(bool* done) = 0;
  // The client went away or was cut off: stop producing (called at most once, on an I/O thread).
  virtual void cancel() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<BodySource> stream;  // set: the body is streamed (chunked) from it instead of `body`

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  std::string get_header_value(std::string_view name) const;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

// Where a route's handler runs: Inline for cheap handlers that never block
// (they answer even when every worker is busy), Worker for everything else.
enum class Dispatch { Worker, Inline };

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port
  int io_threads = 2;          // threads running the sockets
  int workers = 64;            // threads running Worker handlers
  int max_connections = 1024;  // open connections; more get 503
  int header_timeout_s = 10;   // request head complete within this
  int body_timeout_s = 60;     // request body complete within this after the head
  int idle_timeout_s = 5;      // keep-alive: close an idle connection after this
  int write_timeout_s = 600;   // each write (a response, a stream chunk) finishes within this
  uint64_t max_body_bytes = uint64_t(64) << 20;
  uint32_t max_header_bytes = 64 << 10;
};

// Counters of the connection layer (for /metrics).
struct HttpStats {
  int64_t open = 0;          // connections open now
  int64_t accepted = 0;      // connections accepted in all
  int64_t rejected = 0;      // refused with 503 (over max_connections)
  int64_t timed_out = 0;     // cut by a header, body, idle or write deadline
  int64_t too_large = 0;     // bodies refused with 413
  int64_t bad_requests = 0;  // malformed HTTP (400/431)
};

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `path` is matched exactly; one ending in '*' matches every path with that prefix
  // that no exact route takes (e.g. "/*": the chat page's files).
  void Get(const std::string& path, HttpHandler h, Dispatch d = Dispatch::Worker);
  void Post(const std::string& path, HttpHandler h, Dispatch d = Dispatch::Worker);
  // Runs before routing (after the body is read), for every method but OPTIONS:
  // returns true when it answered (e.g. 401), and the route is not called.
  void set_pre_routing_handler(std::function<bool(const HttpRequest&, HttpResponse&)> h);
  // Turns an exception thrown by a handler into a response.
  void set_exception_handler(std::function<void(std::exception_ptr, HttpResponse&)> h);

  // Binds and listens (SO_REUSEADDR, not SO_REUSEPORT): returns the port.
  // Throws opal::Error naming the address when it cannot.
  int bind(const HttpOptions& opts);
  // Sets the limits without binding (for answer_raw alone).
  void configure(const HttpOptions& opts);
  // Starts the I/O and worker threads.
  void start();
  // Stops accepting; requests being handled or written finish (up to
  // `grace_ms`), idle connections close; then every thread is joined.
  // Safe to call twice and from any thread but an I/O or worker thread.
  void stop(int grace_ms = 5000);
  // Blocks until stop() has finished.
  void wait();

  HttpStats stats() const;
  // Prometheus text lines for stats() (opal:http_* names).
  std::string render_metrics() const;

  // Parses one request from raw bytes and answers it in this thread (handlers
  // run inline, a stream is drained), with the same limits and routing as a
  // socket: what a connection would send back, as text. For the fuzz target.
  std::string answer_raw(std::string_view raw);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace opal::server
