// Helpers for the server tests: an in-process server on an ephemeral port, an
// httplib client, SSE parsing, and a real `opal serve` child process.
#pragma once
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"

namespace opal::test {

using json = nlohmann::json;

// The stories260K model (SPM, no chat template: ChatML fallback).
std::string stories_model();

// A server started in this process (model loaded) and stopped on destruction.
class LocalServer {
 public:
  explicit LocalServer(server::ServerOptions opts);
  ~LocalServer();
  int port() const { return port_; }
  std::unique_ptr<httplib::Client> client(int timeout_s = 60) const;
  // POST a JSON body; returns the response (status 0 when the request failed).
  httplib::Result post(const std::string& path, const json& body, const httplib::Headers& headers = {}) const;
  httplib::Result get(const std::string& path, const httplib::Headers& headers = {}) const;
  server::Server& server() { return *server_; }

 private:
  std::unique_ptr<server::Server> server_;
  int port_ = 0;
};

server::ServerOptions default_options(int n_parallel = 1, int64_t n_ctx = 0);

// One SSE stream: the JSON payload of every `data:` event, and whether the
// last event was `data: [DONE]`.
struct SseStream {
  std::vector<json> events;
  bool done_marker = false;
  bool well_formed = true;  // every event was `data: <json>` + blank line, nothing after [DONE]
  std::string error;
};
SseStream parse_sse(const std::string& body);
// Streams a POST and parses the events as they arrive.
SseStream post_stream(const std::string& host, int port, const std::string& path, const json& body, int timeout_s = 60);

// A streamed chat request ("Hi", ignore_eos) on a thread of its own: appends the
// raw body to *raw and counts the chunks in *chunks until the server ends the
// stream. read_timeout_s > 0 sets the client's read timeout.
std::thread stream_hi_chat(int port, std::string* raw, std::atomic<int>* chunks, int read_timeout_s = 0);

// Concatenated `delta.content` of a chat stream / `text` of a completions stream.
std::string chat_stream_text(const SseStream& s);

// `opal serve ARGS` as a child process on a free port; killed (SIGKILL) on destruction
// unless it already exited.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& args, const std::vector<std::string>& env = {});
  ~ServeProcess();
  bool ready() const { return port_ > 0; }
  int port() const { return port_; }
  int pid() const { return pid_; }
  // Waits up to `timeout_s` for exit; returns the exit code, or -1 on timeout / signal.
  int wait_exit(int timeout_s);
  std::string log() const;

 private:
  int pid_ = -1;
  int port_ = -1;
  bool exited_ = false;
  std::string log_path_;
};

// Prometheus sample value of a metric line `name value` (or -1 if absent).
double metric_value(const std::string& text, const std::string& name);

}  // namespace opal::test
