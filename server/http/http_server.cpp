// HttpServer on Boost.Beast / Boost.Asio (see http_server.h for the model).
//
// One Session per connection, all its work on one strand, one timer for the
// deadline of the phase it is in:
//   idle (keep-alive, waiting for the first byte: idle_timeout_s; a new
//   connection's first request is under the header deadline from accept)
//   -> head (header_timeout_s) -> 413 from Content-Length, or 100 Continue
//   -> body (body_timeout_s; chunked counted by the parser's body limit)
//   -> handler (inline, or on a worker thread; no deadline)
//   -> write (write_timeout_s per write; a stream writes one chunk at a time,
//      pulling the BodySource again when the previous write completed, and
//      watches the socket for the client closing meanwhile)
//   -> idle again, or close (with a short linger that drains what the client
//      still sends, so an early answer such as 413 is not lost to a reset).
// A connection over max_connections gets a canned 503 and is closed.
#include "server/http/http_server.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace opal::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string error_json(int status, const char* type, const std::string& message) {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = nullptr;
  e["code"] = status;
  return nlohmann::ordered_json{{"error", e}}.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void set_error(HttpResponse& res, int status, const char* type, const std::string& message) {
  res = HttpResponse{};
  res.status = status;
  res.set_content(error_json(status, type, message), "application/json");
}

struct Route {
  std::string method, path;
  HttpHandler handler;
  Dispatch dispatch;
};

}  // namespace

void ClientWatch::on_gone(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!gone_) {
      f_ = std::move(f);
      return;
    }
  }
  if (f) f();
}

bool ClientWatch::gone() const {
  std::lock_guard<std::mutex> lk(mu_);
  return gone_;
}

void ClientWatch::set_gone() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (gone_) return;
    gone_ = true;
    f = std::move(f_);
    f_ = nullptr;
  }
  if (f) f();
}

std::string HttpRequest::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return true;
  return false;
}

std::string HttpResponse::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

class Session;

struct HttpServer::Impl {
  HttpOptions opts;
  std::vector<Route> routes;
  std::function<bool(const HttpRequest&, HttpResponse&)> pre_routing;
  std::function<void(std::exception_ptr, HttpResponse&)> on_exception;

  std::unique_ptr<asio::io_context> ioc = std::make_unique<asio::io_context>();
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;  // after EMFILE
  std::vector<std::thread> io_threads;
  std::unique_ptr<asio::thread_pool> workers;

  std::atomic<bool> stopping{false};
  std::mutex mu;  // sessions, stopped
  std::condition_variable cv;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_id = 0;
  bool started = false, stopped = false, stop_begun = false;

  std::atomic<int64_t> open{0}, accepted{0}, rejected{0}, timed_out{0}, too_large{0}, bad_requests{0};

  // An exact path first, then a route ending in '*' whose prefix the path has (the chat page's files).
  const Route* find(const std::string& method, const std::string& path) const {
    const Route* prefix = nullptr;
    for (const Route& r : routes) {
      if (r.method != method && !(method == "HEAD" && r.method == "GET")) continue;
      if (r.path == path) return &r;
      if (!prefix && !r.path.empty() && r.path.back() == '*' &&
          path.compare(0, r.path.size() - 1, r.path, 0, r.path.size() - 1) == 0)
        prefix = &r;
    }
    return prefix;
  }
  bool is_inline(const HttpRequest& req) const {
    if (req.method == "OPTIONS") return true;
    const Route* r = find(req.method, req.path);
    return r == nullptr || r->dispatch == Dispatch::Inline;
  }
  // Answers a complete request in the calling thread.
  void respond(const HttpRequest& req, HttpResponse& res) const;
  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
};

void HttpServer::Impl::respond(const HttpRequest& req, HttpResponse& res) const {
  if (req.method == "OPTIONS") {  // CORS preflight, as llama-server answers it (no key needed)
    res.status = 204;
    res.set_header("Access-Control-Allow-Credentials", "true");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "*" : asked);
    res.set_header("Access-Control-Max-Age", "86400");
    return;
  }
  try {
    if (pre_routing && pre_routing(req, res)) return;
    const Route* r = find(req.method, req.path);
    if (!r) {
      set_error(res, 404, "not_found_error", fmt::format("no route for {} {}", req.method, req.path));
      return;
    }
    r->handler(req, res);
  } catch (...) {
    res = HttpResponse{};
    if (on_exception) on_exception(std::current_exception(), res);
    else set_error(res, 500, "server_error", "the handler failed");
  }
}

namespace {

// The request as the routes see it.
HttpRequest to_request(bhttp::request<bhttp::string_body>&& m) {
  HttpRequest r;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& f : m) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = std::move(m.body());
  return r;
}

// CORS headers on every response: the caller's Origin (or *).
void add_cors(const HttpRequest& req, HttpResponse& res) {
  const std::string origin = req.get_header_value("Origin");
  res.set_header("Access-Control-Allow-Origin", origin.empty() ? "*" : origin);
  if (!origin.empty()) res.set_header("Vary", "Origin");
}

template <class Body>
void fill_head(bhttp::response<Body>& m, const HttpResponse& res, bool keep_alive) {
  m.set(bhttp::field::server, "opal");
  if (!res.content_type.empty()) m.set(bhttp::field::content_type, res.content_type);
  for (const auto& [k, v] : res.headers) m.insert(k, v);
  m.keep_alive(keep_alive);
}

std::unique_ptr<bhttp::response<bhttp::string_body>> to_message(HttpResponse&& res, unsigned version, bool keep_alive,
                                                                bool head_only) {
  auto m = std::make_unique<bhttp::response<bhttp::string_body>>();
  m->version(version);
  m->result(unsigned(res.status));
  fill_head(*m, res, keep_alive);
  m->body() = std::move(res.body);
  m->prepare_payload();
  if (head_only) m->body().clear();  // Content-Length stays that of the GET
  return m;
}

}  // namespace

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl& srv, tcp::socket socket, bool reject)
      : srv_(srv), socket_(std::move(socket)), timer_(socket_.get_executor()), reject_(reject) {}

  ~Session() {
    if (source_) source_->cancel();
    if (!reject_) {
      std::lock_guard<std::mutex> lk(srv_.mu);
      srv_.sessions.erase(id_);
      --srv_.open;
    }
    srv_.cv.notify_all();
  }

  void start() {
    if (reject_) return start_reject();
    {
      std::lock_guard<std::mutex> lk(srv_.mu);
      id_ = srv_.next_id++;
      srv_.sessions[id_] = weak_from_this();
    }
    arm(srv_.opts.header_timeout_s);
    new_parser();
    read_head();
  }

  // Called on the strand when the server stops: idle connections close now,
  // the others after their response (Connection: close).
  void on_stop() {
    draining_ = true;
    if (phase_ == Phase::Idle) close();
  }
  void force_close() {
    if (source_) {
      source_->cancel();
      source_.reset();
    }
    close();
  }
  asio::any_io_executor executor() { return socket_.get_executor(); }

 private:
  enum class Phase { Idle, Head, Body, Handler, Write, Stream, Linger };

  // ---- deadlines -------------------------------------------------------------
  void arm(int seconds) { arm_ms(int64_t(seconds) * 1000); }
  void arm_ms(int64_t ms) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->on_deadline();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }
  void on_deadline() {
    if (phase_ == Phase::Linger) return close();
    if (!reject_) ++srv_.timed_out;
    force_close();
  }

  // ---- reading a request -----------------------------------------------------
  void new_parser() {
    parser_.emplace();
    parser_->header_limit(srv_.opts.max_header_bytes);
    parser_->body_limit(boost::none);  // checked from the head below
  }

  void wait_for_request() {
    new_parser();
    if (draining_ || srv_.stopping) return close();
    if (buffer_.size() > 0) {  // pipelined bytes already here
      arm(srv_.opts.header_timeout_s);
      return read_head();
    }
    phase_ = Phase::Idle;
    arm(srv_.opts.idle_timeout_s);
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->closed_) return;
      if (ec) return self->close();
      self->arm(self->srv_.opts.header_timeout_s);
      self->read_head();
    });
  }

  void read_head() {
    phase_ = Phase::Head;
    bhttp::async_read_header(socket_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(beast::error_code ec) {
    if (closed_) return;
    if (ec) return on_read_error(ec);
    const auto len = parser_->content_length();
    if (len && *len > srv_.opts.max_body_bytes) {
      ++srv_.too_large;
      return reply_error(413, "invalid_request_error",
                         fmt::format("the request body is {} bytes, over the limit of {} bytes (--max-body-size)", *len,
                                     srv_.opts.max_body_bytes));
    }
    parser_->body_limit(srv_.opts.max_body_bytes);
    if (parser_->is_done()) return on_request();
    phase_ = Phase::Body;
    arm(srv_.opts.body_timeout_s);
    const auto& head = parser_->get();
    if (iequals(head[bhttp::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    bhttp::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->on_read_error(ec);
      self->on_request();
    });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      ++srv_.too_large;
      return reply_error(413, "invalid_request_error",
                         fmt::format("the chunked request body grew past the limit of {} bytes (--max-body-size)",
                                     srv_.opts.max_body_bytes));
    }
    if (ec == bhttp::error::header_limit) {
      ++srv_.bad_requests;
      return reply_error(431, "invalid_request_error",
                         fmt::format("the request head is over the limit of {} bytes", srv_.opts.max_header_bytes));
    }
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == bhttp::error::partial_message)
      return close();
    ++srv_.bad_requests;
    reply_error(400, "invalid_request_error", fmt::format("malformed HTTP request: {}", ec.message()));
  }

  // An error answered before the request was fully read: the connection closes after it.
  void reply_error(int status, const char* type, const std::string& message) {
    HttpResponse res;
    set_error(res, status, type, message);
    keep_alive_ = false;
    version_ = 11;
    write(std::move(res));
  }

  // ---- answering ---------------------------------------------------------------
  void on_request() {
    disarm();
    phase_ = Phase::Handler;
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    req_ = std::make_shared<HttpRequest>(to_request(std::move(msg)));
    if (srv_.is_inline(*req_)) {
      HttpResponse res;
      srv_.respond(*req_, res);
      return write(std::move(res));
    }
    asio::post(*srv_.workers, [self = shared_from_this()] {
      auto res = std::make_shared<HttpResponse>();
      self->srv_.respond(*self->req_, *res);
      asio::post(self->socket_.get_executor(), [self, res] { self->on_handler_done(std::move(*res)); });
    });
    watch_during_handler();
  }

  // While a worker runs the handler nothing is read, except to notice the
  // client closing: then the request's ClientWatch fires (the handler cancels
  // its task, freeing the slot) and the connection closes. Bytes that do
  // arrive (a pipelined request) are kept for later.
  void watch_during_handler() {
    if (buffer_.size() >= 65536) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (self->closed_) return;
      if (n > 0) self->buffer_.commit(n);
      if (self->handler_result_) {  // the handler finished: the watch was cancelled to write its answer
        HttpResponse res = std::move(*self->handler_result_);
        self->handler_result_.reset();
        return self->write(std::move(res));
      }
      if (ec) {  // the client went away while its request was being handled
        if (self->req_) self->req_->client->set_gone();
        return self->close();
      }
      self->watch_during_handler();
    });
  }

  void on_handler_done(HttpResponse res) {
    if (closed_) return;
    if (watching_) {  // end the watch first; its completion writes the answer
      handler_result_ = std::move(res);
      beast::error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    write(std::move(res));
  }

  void write(HttpResponse res) {
    if (closed_) return;
    if (req_) add_cors(*req_, res);
    const bool keep = keep_alive_ && !draining_ && !srv_.stopping;
    const bool head_only = req_ && req_->method == "HEAD";
    if (res.stream && !head_only) return write_stream_head(std::move(res), keep);
    phase_ = Phase::Write;
    out_msg_ = to_message(std::move(res), version_, keep, head_only);
    arm(srv_.opts.write_timeout_s);
    bhttp::async_write(socket_, *out_msg_, [self = shared_from_this(), keep](beast::error_code ec, size_t) {
      if (self->closed_) return;
      self->disarm();
      self->out_msg_.reset();
      if (ec) return self->close();
      self->after_response(keep);
    });
  }

  void after_response(bool keep) {
    req_.reset();
    if (keep && !draining_ && !srv_.stopping) return wait_for_request();
    linger_close();
  }

  // ---- streaming ---------------------------------------------------------------
  void write_stream_head(HttpResponse res, bool keep) {
    phase_ = Phase::Stream;
    stream_keep_ = keep;
    source_ = std::move(res.stream);
    stream_head_ = std::make_unique<bhttp::response<bhttp::empty_body>>();
    stream_head_->version(version_);
    stream_head_->result(unsigned(res.status));
    fill_head(*stream_head_, res, keep);
    stream_head_->chunked(true);
    serializer_ = std::make_unique<bhttp::response_serializer<bhttp::empty_body>>(*stream_head_);
    std::weak_ptr<Session> weak = weak_from_this();
    auto ex = socket_.get_executor();
    source_->set_wakeup([weak, ex] {
      asio::post(ex, [weak] {
        if (auto s = weak.lock()) s->pump();
      });
    });
    writing_ = true;
    arm(srv_.opts.write_timeout_s);
    bhttp::async_write_header(socket_, *serializer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      self->disarm();
      if (ec) return self->force_close();
      self->writing_ = false;
      self->pump();
    });
    watch_for_close();
  }

  // While a stream is written nothing is read, except to notice the client
  // closing (then the source is cancelled at once, freeing its slot).
  // Bytes that do arrive (a pipelined request) are kept for later.
  void watch_for_close() {
    if (buffer_.size() >= 65536) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (self->closed_) return;
      if (n > 0) self->buffer_.commit(n);
      if (self->stream_finished_) return self->after_stream();
      if (ec) return self->force_close();  // the client went away
      self->watch_for_close();
    });
  }

  void pump() {
    if (closed_ || !source_ || writing_ || stream_finished_) return;
    bool done = false;
    std::string data = source_->pull(&done);
    if (data.empty() && !done) return;
    writing_ = true;
    chunk_ = std::move(data);
    arm(srv_.opts.write_timeout_s);
    auto then = [self = shared_from_this(), done](beast::error_code ec, size_t) {
      if (self->closed_) return;
      self->disarm();
      if (ec) return self->force_close();
      if (done) return self->write_last_chunk();
      self->writing_ = false;
      self->pump();
    };
    if (chunk_.empty()) return then(beast::error_code{}, 0);
    asio::async_write(socket_, bhttp::make_chunk(asio::buffer(chunk_)), std::move(then));
  }

  void write_last_chunk() {
    arm(srv_.opts.write_timeout_s);
    asio::async_write(socket_, bhttp::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      self->disarm();
      self->source_.reset();  // the request is answered (its InFlight guard goes)
      self->serializer_.reset();
      self->stream_head_.reset();
      if (ec) return self->close();
      self->stream_finished_ = true;
      if (self->watching_) {
        beast::error_code ignored;
        self->socket_.cancel(ignored);  // the watch ends, then after_stream()
        return;
      }
      self->after_stream();
    });
  }

  void after_stream() {
    stream_finished_ = false;
    writing_ = false;
    after_response(stream_keep_);
  }

  // ---- closing -----------------------------------------------------------------
  // Half-closes and drains what the client still sends (up to 1 s), so an
  // answer sent before its request was read is not lost to a TCP reset.
  void linger_close() {
    if (closed_) return;
    phase_ = Phase::Linger;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    arm_ms(1000);
    drain();
  }
  void drain() {
    if (!drain_buf_) drain_buf_ = std::make_unique<std::array<char, 16384>>();
    socket_.async_read_some(asio::buffer(*drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    disarm();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  // ---- over the connection cap ---------------------------------------------------
  void start_reject() {
    ++srv_.rejected;
    // Read what the client sent first (briefly), answer 503, close.
    timer_.expires_after(std::chrono::milliseconds(250));
    if (!drain_buf_) drain_buf_ = std::make_unique<std::array<char, 16384>>();
    socket_.async_read_some(asio::buffer(*drain_buf_), [self = shared_from_this()](beast::error_code, size_t) {
      if (!self->closed_ && !self->answered_reject_) self->send_reject();
    });
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && !self->closed_ && !self->answered_reject_) self->send_reject();
    });
  }
  void send_reject() {
    answered_reject_ = true;
    disarm();
    beast::error_code ignored;
    socket_.cancel(ignored);
    HttpResponse res;
    set_error(res, 503, "unavailable_error",
              fmt::format("the server has {} connections open, its limit (--max-connections); retry later",
                          srv_.opts.max_connections));
    res.set_header("Retry-After", "1");
    res.set_header("Access-Control-Allow-Origin", "*");
    keep_alive_ = false;
    version_ = 11;
    phase_ = Phase::Write;
    out_msg_ = to_message(std::move(res), 11, false, false);
    arm(5);
    bhttp::async_write(socket_, *out_msg_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      self->disarm();
      if (ec) return self->close();
      self->linger_close();
    });
  }

  HttpServer::Impl& srv_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  const bool reject_;
  bool answered_reject_ = false;
  uint64_t id_ = 0;
  Phase phase_ = Phase::Head;
  bool closed_ = false, draining_ = false;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<HttpRequest> req_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  std::unique_ptr<bhttp::response<bhttp::string_body>> out_msg_;
  std::optional<HttpResponse> handler_result_;  // a worker's answer waiting for the watch to end
  // streaming
  std::shared_ptr<BodySource> source_;
  std::unique_ptr<bhttp::response<bhttp::empty_body>> stream_head_;
  std::unique_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::string chunk_;
  bool writing_ = false, watching_ = false, stream_finished_ = false, stream_keep_ = false;
  std::unique_ptr<std::array<char, 16384>> drain_buf_;
};

// ---- accepting ---------------------------------------------------------------------

void HttpServer::Impl::do_accept() {
  acceptor->async_accept(asio::make_strand(*ioc),
                         [this](beast::error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (stopping || !acceptor->is_open()) return;
  if (ec) {
    if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory) {
      // Out of file descriptors: accepting again at once would spin.
      accept_retry->expires_after(std::chrono::milliseconds(50));
      accept_retry->async_wait([this](beast::error_code e) {
        if (!e && !stopping) do_accept();
      });
      return;
    }
    return do_accept();
  }
  ++accepted;
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks go out at once
  const bool reject = open.load() >= opts.max_connections;
  if (!reject) ++open;
  auto s = std::make_shared<Session>(*this, std::move(socket), reject);
  asio::dispatch(s->executor(), [s] { s->start(); });
  do_accept();
}

// ---- HttpServer --------------------------------------------------------------------

HttpServer::HttpServer() : impl_(std::make_shared<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::Get(const std::string& path, HttpHandler h, Dispatch d) {
  impl_->routes.push_back(Route{"GET", path, std::move(h), d});
}
void HttpServer::Post(const std::string& path, HttpHandler h, Dispatch d) {
  impl_->routes.push_back(Route{"POST", path, std::move(h), d});
}
void HttpServer::set_pre_routing_handler(std::function<bool(const HttpRequest&, HttpResponse&)> h) {
  impl_->pre_routing = std::move(h);
}
void HttpServer::set_exception_handler(std::function<void(std::exception_ptr, HttpResponse&)> h) {
  impl_->on_exception = std::move(h);
}

void HttpServer::configure(const HttpOptions& opts) { impl_->opts = opts; }

int HttpServer::bind(const HttpOptions& opts) {
  Impl& m = *impl_;
  m.opts = opts;
  if (m.opts.io_threads < 1 || m.opts.workers < 1 || m.opts.max_connections < 1)
    fail("HTTP: io_threads, workers and max_connections must be at least 1 (got {}, {}, {})", m.opts.io_threads,
         m.opts.workers, m.opts.max_connections);
  // Each connection is a file descriptor: raise the soft limit toward the hard one if needed.
  rlimit rl{};
  const rlim_t want = rlim_t(m.opts.max_connections) + 256;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
    rl.rlim_cur = std::min(want, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  beast::error_code ec;
  tcp::resolver resolver(*m.ioc);
  auto results = resolver.resolve(m.opts.host, std::to_string(m.opts.port), tcp::resolver::passive, ec);
  if (ec || results.empty())
    fail("cannot listen on {}:{} (cannot resolve the host: {})", m.opts.host, m.opts.port, ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  m.acceptor.emplace(asio::make_strand(*m.ioc));  // its handlers and stop()'s close never run at once
  m.acceptor->open(ep.protocol(), ec);
  // SO_REUSEADDR (a restart need not wait for TIME_WAIT) and never SO_REUSEPORT:
  // a second server on a taken port must fail here, not share the port.
  if (!ec) m.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(ep, ec);
  if (!ec) m.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    m.acceptor.reset();
    fail("cannot listen on {}:{} ({})", m.opts.host, m.opts.port, ec.message());
  }
  m.accept_retry.emplace(m.acceptor->get_executor());
  return m.acceptor->local_endpoint().port();
}

void HttpServer::start() {
  Impl& m = *impl_;
  if (!m.acceptor) fail("HttpServer::start() before a successful bind()");
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.started || m.stop_begun) return;
    m.started = true;
  }
  m.work.emplace(m.ioc->get_executor());
  m.workers = std::make_unique<asio::thread_pool>(size_t(m.opts.workers));
  m.do_accept();
  for (int i = 0; i < m.opts.io_threads; ++i) m.io_threads.emplace_back([&m] { m.ioc->run(); });
}

void HttpServer::stop(int grace_ms) {
  Impl& m = *impl_;
  {
    std::unique_lock<std::mutex> lk(m.mu);
    if (m.stop_begun) {  // a second caller waits for the first
      m.cv.wait(lk, [&] { return m.stopped; });
      return;
    }
    m.stop_begun = true;
    if (!m.started) {
      m.stopped = true;
      m.acceptor.reset();
      m.cv.notify_all();
      return;
    }
  }
  m.stopping = true;
  asio::post(m.acceptor->get_executor(), [&m] {
    beast::error_code ec;
    m.acceptor->close(ec);
    m.accept_retry->cancel();
  });
  auto each_session = [&m](auto fn) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      for (auto& [id, w] : m.sessions)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) asio::post(s->executor(), [s, fn] { fn(*s); });
  };
  each_session([](Session& s) { s.on_stop(); });
  {
    std::unique_lock<std::mutex> lk(m.mu);
    m.cv.wait_for(lk, std::chrono::milliseconds(grace_ms), [&] { return m.open.load() == 0; });
  }
  each_session([](Session& s) { s.force_close(); });
  {
    std::unique_lock<std::mutex> lk(m.mu);
    m.cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return m.open.load() == 0; });
  }
  m.work.reset();
  m.ioc->stop();
  for (auto& t : m.io_threads) t.join();
  m.io_threads.clear();
  m.workers->stop();
  m.workers->join();
  m.workers.reset();  // handlers it never ran (and the sessions they hold) go while the io_context exists
  // What is left (handlers never run) is destroyed with the io_context, sessions included.
  m.accept_retry.reset();
  m.acceptor.reset();
  m.ioc.reset();
  std::lock_guard<std::mutex> lk(m.mu);
  m.stopped = true;
  m.cv.notify_all();
}

void HttpServer::wait() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->stopped; });
}

HttpStats HttpServer::stats() const {
  const Impl& m = *impl_;
  return {m.open.load(),      m.accepted.load(),  m.rejected.load(),
          m.timed_out.load(), m.too_large.load(), m.bad_requests.load()};
}

std::string HttpServer::render_metrics() const {
  const HttpStats s = stats();
  std::string out;
  auto line = [&out](const char* name, const char* type, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  line("opal:http_connections_open", "gauge", "HTTP connections open now.", s.open);
  line("opal:http_connections_accepted_total", "counter", "HTTP connections accepted.", s.accepted);
  line("opal:http_connections_rejected_total", "counter",
       "HTTP connections refused with 503 over the connection limit.", s.rejected);
  line("opal:http_connections_timed_out_total", "counter",
       "HTTP connections cut by a header, body, keep-alive or write deadline.", s.timed_out);
  line("opal:http_requests_too_large_total", "counter", "HTTP request bodies refused with 413.", s.too_large);
  line("opal:http_requests_malformed_total", "counter", "Malformed HTTP requests (400, 431).", s.bad_requests);
  return out;
}

std::string HttpServer::answer_raw(std::string_view raw) {
  Impl& m = *impl_;
  bhttp::request_parser<bhttp::string_body> p;
  p.header_limit(m.opts.max_header_bytes);
  p.body_limit(boost::none);
  p.eager(true);
  HttpResponse res;
  HttpRequest req;
  bool have_request = false;
  beast::error_code ec;
  asio::const_buffer in(raw.data(), raw.size());
  while (in.size() > 0 && !p.is_header_done()) {
    const size_t n = p.put(in, ec);
    if (ec == bhttp::error::need_more) ec = {};
    if (ec || n == 0) break;
    in += n;
  }
  if (!ec && p.is_header_done()) {
    const auto len = p.content_length();
    if (len && *len > m.opts.max_body_bytes) {
      set_error(res, 413, "invalid_request_error", "over the body limit");
    } else {
      p.body_limit(m.opts.max_body_bytes);
      while (in.size() > 0 && !p.is_done()) {
        const size_t n = p.put(in, ec);
        if (ec == bhttp::error::need_more) ec = {};
        if (ec || n == 0) break;
        in += n;
      }
      if (!ec && !p.is_done()) return {};  // incomplete: a connection would wait, then time out
      if (!ec) {
        req = to_request(p.release());
        have_request = true;
        m.respond(req, res);
      }
    }
  } else if (!ec) {
    return {};
  }
  if (ec) {
    const int status = ec == bhttp::error::body_limit ? 413 : ec == bhttp::error::header_limit ? 431 : 400;
    set_error(res, status, "invalid_request_error", fmt::format("malformed HTTP request: {}", ec.message()));
  }
  if (have_request) add_cors(req, res);
  std::string body;
  if (res.stream) {  // drain it here (pull() never blocks: poll)
    // The engine thread may still be inside a copy of the wakeup after this
    // returns (Task::push calls it outside its lock): it must own what it touches.
    auto woken = std::make_shared<std::atomic<bool>>(true);
    res.stream->set_wakeup([woken] { *woken = true; });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (bool done = false; !done;) {
      body += res.stream->pull(&done);
      if (!done && std::chrono::steady_clock::now() > deadline) {
        res.stream->cancel();
        break;
      }
      if (!done) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    res.stream->set_wakeup(nullptr);
    res.stream.reset();
  }
  if (!body.empty()) res.body = std::move(body);
  std::ostringstream os;
  os << *to_message(std::move(res), 11, false, false);
  return os.str();
}

}  // namespace opal::server
