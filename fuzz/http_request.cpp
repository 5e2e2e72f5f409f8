// libFuzzer target for `opal serve`'s request handling (see docs/fuzzing.md):
// raw bytes -> the HTTP layer's parser (Boost.Beast, with the server's head
// and body limits) -> routing, authentication, CORS -> the route handlers'
// JSON parsing and validation -> (for valid requests) a real generation with
// stories260K, streamed or not -> the serialized response.
//
// Any input must give either nothing (an incomplete request: a socket would
// wait for more, then time out) or a well-formed HTTP/1.1 response whose
// status is not 500 (a 500 means an exception the handlers did not turn into
// a client error), and an error status must carry a JSON error object. Never
// a crash, sanitizer report, hang or runaway allocation.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/server.h"

namespace {

opal::server::Server* g_server = nullptr;

void broken(const char* what, const std::string& response) {
  std::fprintf(stderr, "http_request: broken promise: %s\n--- response ---\n%s\n", what,
               response.substr(0, 2000).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("OPAL_SHARED_DIR");
  const std::string shared = env ? env : OPAL_DEFAULT_SHARED_DIR;
  opal::server::ServerOptions o;
  o.model = shared + "/models/stories260K.gguf";
  o.port = 0;
  o.n_parallel = 1;
  o.n_ctx = 256;  // generations end within 256 tokens
  o.threads = 1;
  o.metrics = true;
  o.alias = "stories";
  o.api_key = std::getenv("OPAL_FUZZ_NO_KEY") ? "" : "fuzz-key";  // the auth path is fuzzed too
  o.max_body_bytes = 1 << 20;
  g_server = new opal::server::Server(o);  // never bound to a port: answer_raw only
  g_server->load();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string response = g_server->answer_raw(std::string_view(reinterpret_cast<const char*>(data), size));
  if (response.empty()) return 0;
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) broken("not an HTTP/1.1 status line", response);
  const int status = std::atoi(response.c_str() + 9);
  if (status < 100 || status > 599) broken("status out of range", response);
  if (status == 500) broken("500: an exception no handler turned into a client error", response);
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) broken("no end of the head", response);
  if (status >= 400) {
    const std::string body = response.substr(head_end + 4);
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("error") || !j["error"].contains("message"))
      broken("error without a JSON error object", response);
  }
  return 0;
}
