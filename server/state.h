// Internals shared by server.cpp and the route files: the server's state and
// the helpers that turn engine events into response JSON and SSE frames.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "sampling/grammar.h"
#include "server/http/http_server.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/server.h"
#include "server/slots.h"
#include "tokenizer/jinja/chat.h"
#include "tokenizer/vocab.h"

namespace opal::server {

struct Server::State {
  ServerOptions opts;
  HttpServer http;
  int port = -1;

  std::unique_ptr<Registry> registry;
  std::unique_ptr<Model> model;
  std::optional<Vocab> vocab;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Registry> draft_registry;  // the draft model's own threads or devices (-td, -devd); else null
  std::unique_ptr<Model> draft_model;        // speculative decoding with a draft model (-md)
  std::unique_ptr<Context> draft_ctx;
  std::optional<jinja::Template> chat_template;
  bool template_is_fallback = false;
  std::string chat_template_source;  // what chat_template was parsed from (GET /props)
  json template_vars;                // bos_token, eos_token
  std::unique_ptr<SlotEngine> engine;
  Metrics metrics;
  std::string model_id;
  int64_t created = 0;

  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};  // begin_drain(): new work gets 503, /health too
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // completion requests not yet fully answered (guarded by mu)
  std::once_flag shutdown_once;
  std::once_flag routes_once;

  // Renders a chat prompt with the model's template (ChatML when it has none).
  std::string render_chat(const json& messages, bool add_generation_prompt, const json& kwargs) const;
  // Structured output: compiles GBNF text ("" = none) into gen.sampling's
  // grammar (400 naming `param` when it does not parse). The vocabulary trie
  // is built on the first such request and shared.
  void set_grammar(GenParams& gen, const std::string& gbnf, const std::string& param);
  std::shared_ptr<const GrammarVocab> grammar_vocab;
  std::once_flag grammar_vocab_once;
  // Submits a request; 503 when shutting down or not ready.
  std::shared_ptr<Task> submit(GenParams gen);
  // Embeddings (routes_embeddings.cpp): their own context, made by the first request and used on the
  // engine thread only (SlotEngine::run_on_engine), and the pooling (--pooling, else the GGUF's).
  std::unique_ptr<Context> embd_ctx;
  int pooling = -1;
};

// Keeps a request counted as in flight; cancels its task when the response goes away
// (a client that disconnected mid-stream frees its slot at once).
class InFlight {
 public:
  InFlight(Server::State& st, std::shared_ptr<Task> task);
  ~InFlight();
  Task& task() { return *task_; }

 private:
  Server::State& st_;
  std::shared_ptr<Task> task_;
};

// Everything a finished request produced.
struct Collected {
  std::string text;
  std::vector<TokenOut> tokens;
  Event done;
};
// Waits for a non-streamed request's events until Done; throws HttpError (500,
// or 503 when shutdown came first; the body carries the usage) on an engine
// error. When the client goes away meanwhile the task is cancelled (its slot
// is freed at once) and the Done event says StopType::Cancelled.
Collected collect(const HttpRequest& req, const std::shared_ptr<Task>& task);

// Streams a task as SSE. `frame(event)` returns the text to send for an event
// (possibly empty); after Done or Error it is called no more and the stream ends.
void stream_response(Server::State& st, HttpResponse& res, std::shared_ptr<Task> task,
                     std::function<std::string(const Event&)> frame);
std::string sse(const json& j);

json timings_json(const Timings& t);
const char* finish_reason(const Event& done);
// Adds {"error": {...}} to a response object when the request ended on an
// error of its own (a grammar with no way on: finish_reason "grammar_error").
void add_done_error(json& out, const Event& done);
std::string random_id(const char* prefix);
int64_t unix_time();
// One token's logprob entry in OpenAI chat form {token, logprob, bytes, top_logprobs}.
json chat_logprob_entry(const Vocab& vocab, const TokenOut& t);
// One token's entry in llama-server's native `completion_probabilities` form.
json native_prob_entry(const Vocab& vocab, const TokenOut& t);

void register_openai_routes(Server::State& st);
void register_native_routes(Server::State& st);
// The chat page (server/webui.cpp): GET / and /*; webui_serves() says whether a
// request is for one of its files (public: no API key needed).
void register_webui_routes(Server::State& st);
bool webui_serves(const Server::State& st, const HttpRequest& req);
void register_embedding_routes(Server::State& st);

}  // namespace opal::server
