// `opal serve`: an OpenAI- and llama-server-compatible HTTP server.
//
//   Server s(opts);
//   int port = s.start();   // binds (port 0: ephemeral) and serves; /health says 503
//   s.load();               // loads the model, starts the slots; /health says 200
//   ...
//   s.begin_drain();        // optional: 503 for new work, in-flight requests finish
//   s.shutdown();           // stops accepting, ends in-flight streams with a final event
//   s.wait();               // the HTTP threads have stopped
//
// Endpoints, flags and design: docs/server.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include "backends/factory/backend_factory.h"
#include "models/model.h"
#include "runtime/speculative.h"

namespace opal::server {

struct ServerOptions {
  std::string model;  // GGUF path
  LoadOptions load;   // how the weights are loaded (--lm)
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: any free port
  int n_parallel = 1;                      // slots (-np)
  float slot_prompt_similarity = 0.5f;     // -sps: see EngineOptions::prompt_similarity
  int64_t n_ctx = 0;                       // total context, split evenly over the slots (0: the model's)
  int64_t n_batch = 2048;                  // most tokens one batched decode takes
  int64_t n_ubatch = 512;                  // most tokens per graph run, and per step while slots generate
  int64_t prompt_chunk = 256;              // --prompt-chunk: see EngineOptions::prompt_chunk
  double step_budget_ms = 150;             // --step-budget-ms: see EngineOptions::step_budget_ms
  bool copy_prefixes = true;               // --no-prefix-copy clears it: see EngineOptions::copy_prefixes
  std::string step_log;                    // --step-log FILE: see EngineOptions::step_log
  DType kv_type = DType::F16;              // KV cache type (--ctk)
  std::optional<DType> kv_type_v;          // V cache type (--ctv; unset: kv_type)
  FlashAttn flash_attn = FlashAttn::Auto;  // --fa
  int threads = 0;                         // compute threads (0: all)
  std::string backends;                    // devices besides the CPU, comma-separated (--backend)
  RunHooks* hooks = nullptr;               // perf-event hooks on every decode (--perf-log, --trace...); not owned
  std::string api_key;                     // empty: no key needed
  std::string alias;                       // model id in /v1/models and responses (default: the model path)
  bool metrics = false;                    // enable GET /metrics
  // The backends' own options (--et-fusion).
  BackendTuning backend_tuning;

  // Embeddings (docs/embeddings.md): pooling instead of the GGUF's <arch>.pooling_type (--pooling none, mean,
  // cls or last); empty: the GGUF's. Every server answers embeddings; --embeddings (llama-server's switch to
  // an embedding-only server) is accepted and changes nothing.
  std::string pooling;
  bool embeddings = false;

  // Speculative decoding per slot (docs/speculative.md): spec.type Draft drafts with model_draft.
  std::string model_draft;  // GGUF path of the draft model (-md)
  SpecParams spec;
  int64_t draft_n_ctx = 0;     // -cd: the draft context's cells, shared by the slots (0: the target's)
  int draft_threads = 0;       // -td: the draft model's compute threads (0: the target's registry)
  std::string draft_backends;  // -devd: the draft's backends, "none" for the CPU alone (empty: the target's)
  std::optional<DType> draft_kv_type, draft_kv_type_v;  // -ctkd, -ctvd (unset: the target's)

  // Jinja chat template used instead of the model's (--chat-template-file); empty: the model's.
  std::string chat_template_file;
  // The chat page at `/` (server/webui.h): bundled in the binary; off with --no-webui;
  // webui_path (--path DIR) serves it from a directory instead.
  bool webui = true;
  std::string webui_path;

  // HTTP layer (server/http/http_server.h, docs/server.md):
  int timeout_s = 600;                           // --timeout: each response write finishes within this
  int http_threads = 0;                          // workers running handlers (0: max(64, 8 x slots))
  int io_threads = 2;                            // threads running every socket
  int max_connections = 1024;                    // open connections; more get 503 + Retry-After
  int header_timeout_s = 10;                     // the request head arrives within this
  int body_timeout_s = 60;                       // the body arrives within this after the head
  int idle_timeout_s = 5;                        // an idle keep-alive connection closes after this
  uint64_t max_body_bytes = uint64_t(64) << 20;  // larger bodies: 413 before they are read
  // Test seam: runs on the engine thread before each batched decode; an
  // exception from it fails the decode (every running request ends with an error).
  std::function<void()> before_decode;
  // Test seam: EngineOptions::on_batch (each batch's size and generating slots).
  std::function<void(int64_t n_tokens, int64_t n_generating)> on_batch;
  // Test seam: EngineOptions::step_cost_ms (a step's cost as the step budget sees it).
  std::function<double(int64_t n_prompt, int64_t n_decode)> step_cost_ms;
  // Test seam: EngineOptions::after_finish (the engine thread, right after a request's end went to its client).
  std::function<void()> after_finish;
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving in a background thread; returns the port.
  // Throws opal::Error when the address cannot be bound.
  int start();
  // Loads the model and starts the slot engine. Throws opal::Error.
  void load();
  // Graceful stop: new requests get 503, queued and running requests end with
  // a final event, then the listener closes. Safe to call from any thread, twice.
  void shutdown();
  // Draining (before shutdown() on SIGTERM, for a load balancer): /health and new
  // completion requests answer 503 while the requests already taken run to their
  // end. in_flight() is how many are left.
  void begin_drain();
  int in_flight() const;
  // Blocks until the HTTP server has stopped (after shutdown()).
  void wait();
  // Answers one request given as raw HTTP bytes in this thread, without a
  // socket, through the same parser limits, routes and handlers (for the fuzz
  // target); returns the raw response ("" when the request is incomplete).
  std::string answer_raw(std::string_view raw);
  int port() const;
  // After load(): the model, and each slot's context in tokens.
  const Model& model() const;
  int64_t n_ctx_slot() const;

  struct State;

 private:
  std::unique_ptr<State> st_;
};

}  // namespace opal::server
