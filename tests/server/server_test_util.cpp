#include "server/server_test_util.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "support/test_support.h"

extern char** environ;

namespace opal::test {

std::string stories_model() { return shared_path("models/stories260K.gguf"); }

server::ServerOptions default_options(int n_parallel, int64_t n_ctx) {
  server::ServerOptions o;
  o.model = stories_model();
  o.port = 0;
  o.n_parallel = n_parallel;
  o.n_ctx = n_ctx;
  o.threads = 1;
  o.metrics = true;
  o.alias = "stories";
  return o;
}

LocalServer::LocalServer(server::ServerOptions opts) : server_(std::make_unique<server::Server>(std::move(opts))) {
  port_ = server_->start();
  server_->load();
}

LocalServer::~LocalServer() {
  server_->shutdown();
  server_->wait();
}

std::unique_ptr<httplib::Client> LocalServer::client(int timeout_s) const {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
  c->set_read_timeout(timeout_s, 0);
  c->set_write_timeout(timeout_s, 0);
  return c;
}

httplib::Result LocalServer::post(const std::string& path, const json& body, const httplib::Headers& headers) const {
  return client()->Post(path.c_str(), headers, body.dump(), "application/json");
}

httplib::Result LocalServer::get(const std::string& path, const httplib::Headers& headers) const {
  return client()->Get(path.c_str(), headers);
}

SseStream parse_sse(const std::string& body) {
  SseStream s;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      s.well_formed = false;
      s.error = "trailing bytes without a blank line: " + body.substr(pos, 80);
      break;
    }
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) {
      s.well_formed = false;
      s.error = "event without 'data: ': " + ev.substr(0, 80);
      continue;
    }
    if (s.done_marker) {
      s.well_formed = false;
      s.error = "event after [DONE]";
    }
    const std::string payload = ev.substr(6);
    if (payload == "[DONE]") {
      s.done_marker = true;
      continue;
    }
    try {
      s.events.push_back(json::parse(payload));
    } catch (const std::exception& e) {
      s.well_formed = false;
      s.error = std::string("bad JSON in event: ") + e.what();
    }
  }
  return s;
}

SseStream post_stream(const std::string& host, int port, const std::string& path, const json& body, int timeout_s) {
  httplib::Client c(host, port);
  c.set_read_timeout(timeout_s, 0);
  std::string raw;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    raw.append(data, len);
    return true;
  };
  auto res = c.send(req);
  SseStream s = parse_sse(raw);
  if (!res) {
    s.well_formed = false;
    s.error = "request failed: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    s.well_formed = false;
    s.error = "status " + std::to_string(res->status) + ": " + raw;
  }
  return s;
}

std::thread stream_hi_chat(int port, std::string* raw, std::atomic<int>* chunks, int read_timeout_s) {
  return std::thread([=] {
    httplib::Client c("127.0.0.1", port);
    if (read_timeout_s > 0) c.set_read_timeout(read_timeout_s, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = json{
        {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})},
        {"ignore_eos", true},
        {"stream",
         true}}.dump();
    req.content_receiver = [=](const char* d, size_t n, uint64_t, uint64_t) {
      raw->append(d, n);
      ++*chunks;
      return true;
    };
    c.send(req);
  });
}

std::string chat_stream_text(const SseStream& s) {
  std::string text;
  for (const json& e : s.events) {
    if (!e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
        text += c["delta"]["content"].get<std::string>();
      if (c.contains("text") && c["text"].is_string()) text += c["text"].get<std::string>();
    }
  }
  return text;
}

namespace {
std::atomic<int> g_log_counter{0};
}

ServeProcess::ServeProcess(const std::string& args, const std::vector<std::string>& env) {
  log_path_ = temp_dir() + "/serve-" + std::to_string(::getpid()) + "-" + std::to_string(g_log_counter++) + ".log";
  const std::string cmd = "exec " + opal_binary() + " serve --port 0 " + args + " >" + log_path_ + " 2>&1";
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.emplace_back(*e);
  for (const auto& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), envp.data()) != 0) {
    ADD_FAILURE() << "cannot spawn " << cmd;
    return;
  }
  pid_ = pid;
  const std::regex listening(R"(listening on http://[0-9.]+:([0-9]+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int port = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    std::smatch m;
    if (port < 0 && std::regex_search(text, m, listening)) port = std::stoi(m[1]);
    if (port > 0 && text.find("ready:") != std::string::npos) {
      port_ = port;
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      ADD_FAILURE() << "opal serve exited early:\n" << text;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "opal serve did not become ready in time:\n" << log();
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

int ServeProcess::wait_exit(int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string ServeProcess::log() const {
  std::ifstream f(log_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double metric_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, name.size() + 1, name + " ") == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

}  // namespace opal::test
