// Server lifetime (bind, load, graceful shutdown), authentication, error
// mapping, and the helpers that turn engine events into JSON and SSE frames.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "server/state.h"

#include "runtime/embedding.h"
#include "runtime/grammar_vocab.h"

namespace opal::server {

// ---- helpers -----------------------------------------------------------------

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

json timings_json(const Timings& t) {
  json j;
  j["cache_n"] = t.cache_n;
  j["prompt_n"] = t.prompt_n;
  j["prompt_ms"] = t.prompt_ms;
  j["prompt_per_token_ms"] = t.prompt_n ? t.prompt_ms / double(t.prompt_n) : 0.0;
  j["prompt_per_second"] = t.prompt_ms > 0 ? 1e3 * double(t.prompt_n) / t.prompt_ms : 0.0;
  j["predicted_n"] = t.predicted_n;
  j["predicted_ms"] = t.predicted_ms;
  j["predicted_per_token_ms"] = t.predicted_n ? t.predicted_ms / double(t.predicted_n) : 0.0;
  j["predicted_per_second"] = t.predicted_ms > 0 ? 1e3 * double(t.predicted_n) / t.predicted_ms : 0.0;
  if (t.draft_n > 0) {  // as llama-server: only when drafts were verified
    j["draft_n"] = t.draft_n;
    j["draft_n_accepted"] = t.draft_n_accepted;
  }
  return j;
}

// "abort": cut by shutdown (what was generated so far is returned; vLLM's name);
// "cancelled": the client went away (nobody reads it but logs and tests).
const char* finish_reason(const Event& done) {
  if (done.stop_type == StopType::Limit) return "length";
  if (done.stop_type == StopType::Abort) return "abort";
  if (done.stop_type == StopType::Cancelled) return "cancelled";
  if (done.stop_type == StopType::Grammar) return "grammar_error";
  return "stop";
}

void add_done_error(json& out, const Event& done) {
  if (done.stop_type != StopType::Grammar) return;
  out["error"] = json{{"message", done.error}, {"type", "grammar_error"}, {"code", 500}};
}

void Server::State::set_grammar(GenParams& gen, const std::string& gbnf, const std::string& param) {
  if (gbnf.empty()) return;
  try {
    gen.sampling.grammar = Grammar::parse(gbnf);
  } catch (const Error& e) {
    bad_request(e.what(), param);
  }
  std::call_once(grammar_vocab_once, [this] { grammar_vocab = make_grammar_vocab(*vocab); });
  gen.sampling.grammar_vocab = grammar_vocab;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

json chat_logprob_entry(const Vocab& vocab, const TokenOut& t) {
  json e;
  const std::string piece = vocab.token_to_piece(t.id, true);
  e["token"] = piece;
  e["logprob"] = t.logprob;
  e["bytes"] = bytes_of(piece);
  json top = json::array();
  for (const TokenProb& p : t.top) {
    const std::string tp = vocab.token_to_piece(p.token, true);
    top.push_back(json{{"token", tp}, {"logprob", p.logprob}, {"bytes", bytes_of(tp)}});
  }
  e["top_logprobs"] = top;
  return e;
}

json native_prob_entry(const Vocab& vocab, const TokenOut& t) {
  json e;
  const std::string piece = vocab.token_to_piece(t.id, true);
  e["id"] = t.id;
  e["token"] = piece;
  e["logprob"] = t.logprob;
  e["bytes"] = bytes_of(piece);
  json top = json::array();
  for (const TokenProb& p : t.top) {
    const std::string tp = vocab.token_to_piece(p.token, true);
    top.push_back(json{{"id", p.token}, {"token", tp}, {"logprob", p.logprob}, {"bytes", bytes_of(tp)}});
  }
  e["top_logprobs"] = top;
  return e;
}

InFlight::InFlight(Server::State& st, std::shared_ptr<Task> task) : st_(st), task_(std::move(task)) {
  std::lock_guard<std::mutex> lk(st_.mu);
  ++st_.in_flight;
}

InFlight::~InFlight() {
  task_->cancel();  // no-op when it finished; frees the slot when the client went away
  {
    std::lock_guard<std::mutex> lk(st_.mu);
    --st_.in_flight;
  }
  st_.cv.notify_all();
}

Collected collect(const HttpRequest& req, const std::shared_ptr<Task>& task) {
  struct Watch {  // the client's going away cancels the task while this waits
    const HttpRequest& req;
    ~Watch() { req.client->on_gone(nullptr); }
  } watch{req};
  req.client->on_gone([task] { task->cancel(); });
  Collected c;
  for (;;) {
    Event ev;
    if (!task->pop(ev, std::chrono::milliseconds(1000))) continue;
    if (ev.kind == Event::Kind::Error) {
      HttpError e(ev.error_status, ev.error_status == 503 ? "unavailable_error" : "server_error", ev.error);
      e.extra["usage"] = usage_json(ev);
      throw e;
    }
    c.text += ev.text;
    for (TokenOut& t : ev.tokens) c.tokens.push_back(std::move(t));
    if (ev.kind == Event::Kind::Done) {
      c.done = std::move(ev);
      return c;
    }
  }
}

namespace {

// A task's events as an SSE body, pulled by the HTTP layer when the engine
// pushed something (Task::set_notify); never blocks.
class TaskStream : public BodySource {
 public:
  TaskStream(Server::State& st, std::shared_ptr<Task> task, std::function<std::string(const Event&)> frame)
      : guard_(st, std::move(task)), frame_(std::move(frame)) {}
  ~TaskStream() override { guard_.task().set_notify(nullptr); }
  void set_wakeup(std::function<void()> wake) override { guard_.task().set_notify(std::move(wake)); }
  std::string pull(bool* done) override {
    std::string out;
    Event ev;
    while (!ended_ && guard_.task().pop(ev, std::chrono::milliseconds(0))) {
      out += frame_(ev);
      if (ev.kind != Event::Kind::Tokens) ended_ = true;
    }
    *done = ended_;
    return out;
  }
  void cancel() override { guard_.task().cancel(); }  // the client went away: free the slot

 private:
  InFlight guard_;
  std::function<std::string(const Event&)> frame_;
  bool ended_ = false;
};

}  // namespace

void stream_response(Server::State& st, HttpResponse& res, std::shared_ptr<Task> task,
                     std::function<std::string(const Event&)> frame) {
  res.status = 200;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.stream = std::make_shared<TaskStream>(st, std::move(task), std::move(frame));
}

// ---- state -------------------------------------------------------------------

std::string Server::State::render_chat(const json& messages, bool add_generation_prompt, const json& kwargs) const {
  json vars = template_vars;
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) vars[it.key()] = it.value();
  try {
    return jinja::apply_chat_template(*chat_template, messages, add_generation_prompt, vars);
  } catch (const std::exception& e) {
    bad_request(fmt::format("the chat template failed: {}", e.what()), "messages");
  }
}

std::shared_ptr<Task> Server::State::submit(GenParams gen) {
  if (!ready || stopping)
    throw HttpError(503, "unavailable_error", stopping ? "the server is shutting down" : "Loading model");
  if (draining)
    throw HttpError(503, "unavailable_error", "the server is draining (stopping after its requests in flight)");
  auto task = engine->submit(std::move(gen));
  if (!task) throw HttpError(503, "unavailable_error", "the server is shutting down");
  return task;
}

// ---- server ------------------------------------------------------------------

Server::Server(ServerOptions opts) : st_(std::make_unique<State>()) {
  st_->opts = std::move(opts);
  if (st_->opts.n_parallel < 1) fail("-np must be at least 1, got {}", st_->opts.n_parallel);
  if (st_->opts.port < 0 || st_->opts.port > 65535) fail("--port must be in [0, 65535], got {}", st_->opts.port);
  const ServerOptions& o = st_->opts;
  if (o.timeout_s < 1) fail("--timeout must be at least 1 second, got {}", o.timeout_s);
  if (o.http_threads < 0) fail("--http-threads must be 0 (automatic) or more, got {}", o.http_threads);
  if (o.io_threads < 1) fail("the HTTP I/O threads must be at least 1, got {}", o.io_threads);
  if (o.max_connections < 1) fail("--max-connections must be at least 1, got {}", o.max_connections);
  if (o.header_timeout_s < 1 || o.body_timeout_s < 1 || o.idle_timeout_s < 1)
    fail("--header-timeout, --body-timeout and --keep-alive-timeout must be at least 1 second, got {}, {}, {}",
         o.header_timeout_s, o.body_timeout_s, o.idle_timeout_s);
  if (o.max_body_bytes < 1) fail("--max-body-size must be at least 1 byte");
  if (!o.webui_path.empty() && !std::filesystem::is_regular_file(std::filesystem::path(o.webui_path) / "index.html"))
    fail("--path {}: no index.html there (the directory of the chat page's files, e.g. server/webui)", o.webui_path);
  if (!o.pooling.empty()) st_->pooling = int(pooling_from_name(o.pooling));  // --pooling: checked before loading
  st_->created = unix_time();
}

Server::~Server() {
  shutdown();
  wait();
}

int Server::port() const { return st_->port; }
const Model& Server::model() const { return *st_->model; }
int64_t Server::n_ctx_slot() const { return st_->engine->n_ctx_slot(); }

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// `Authorization: Bearer KEY`: the scheme in any case (RFC 9110 11.1), then the key exactly.
bool bearer_matches(const std::string& header, const std::string& key) {
  if (header.size() < 7 || !iequals(std::string_view(header).substr(0, 6), "bearer") || header[6] != ' ') return false;
  size_t i = 6;
  while (i < header.size() && header[i] == ' ') ++i;
  return std::string_view(header).substr(i) == key;
}

// Authentication, error mapping and the routes (once: start() or answer_raw()).
void install_routes(Server::State& st) {
  auto& http = st.http;
  http.set_pre_routing_handler([&st](const HttpRequest& req, HttpResponse& res) {
    if (st.opts.api_key.empty()) return false;
    if (req.path == "/health" || req.path == "/v1/health" || req.path == "/models" || req.path == "/v1/models")
      return false;
    if (webui_serves(st, req)) return false;  // the page's files (it asks for the key itself)
    if (bearer_matches(req.get_header_value("Authorization"), st.opts.api_key) ||
        (req.has_header("X-Api-Key") && req.get_header_value("X-Api-Key") == st.opts.api_key))
      return false;
    res.status = 401;
    res.set_content(dump(error_object(401, "authentication_error", "Invalid API Key")), "application/json");
    return true;
  });
  http.set_exception_handler([](std::exception_ptr ep, HttpResponse& res) {
    int status = 500;
    std::string type = "server_error", message = "unknown error", param;
    json extra = json::object();
    try {
      std::rethrow_exception(ep);
    } catch (const HttpError& e) {
      status = e.status;
      type = e.type;
      message = e.what();
      param = e.param;
      extra = e.extra;
    } catch (const Error& e) {  // user-caused (a bad token id, text the tokenizer refuses...)
      status = 400;
      type = "invalid_request_error";
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    res.status = status;
    json body = error_object(status, type, message, param);
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    res.set_content(dump(body), "application/json");
  });

  register_native_routes(st);
  register_openai_routes(st);
  register_webui_routes(st);
  register_embedding_routes(st);
}

HttpOptions http_options(const ServerOptions& o) {
  HttpOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.io_threads = o.io_threads;
  ho.workers = o.http_threads > 0 ? o.http_threads : std::max(64, 8 * o.n_parallel);
  ho.max_connections = o.max_connections;
  ho.header_timeout_s = o.header_timeout_s;
  ho.body_timeout_s = o.body_timeout_s;
  ho.idle_timeout_s = o.idle_timeout_s;
  ho.write_timeout_s = o.timeout_s;
  ho.max_body_bytes = o.max_body_bytes;
  return ho;
}

}  // namespace

int Server::start() {
  State& st = *st_;
  std::call_once(st.routes_once, [&st] { install_routes(st); });
  st.port = st.http.bind(http_options(st.opts));  // throws naming the address when it is taken
  st.http.start();
  return st.port;
}

void Server::load() {
  State& st = *st_;
  st.registry = make_registry(parse_backend_list(st.opts.backends), st.opts.threads, st.opts.backend_tuning);
  st.model = Model::load(st.opts.model, *st.registry, st.opts.load);
  st.vocab.emplace(Vocab::from_gguf(st.model->gguf()));

  jinja::ModelChatTemplate tmpl = jinja::chat_template_from_gguf(st.model->gguf());
  if (!st.opts.chat_template_file.empty()) {  // --chat-template-file: replaces the model's; must parse
    std::ifstream f(st.opts.chat_template_file, std::ios::binary);
    if (!f) throw Error(fmt::format("cannot read chat template file '{}'", st.opts.chat_template_file));
    tmpl = {std::string(std::istreambuf_iterator<char>(f), {}), false};
    try {
      jinja::Template::parse(tmpl.source);
    } catch (const std::exception& e) {
      throw Error(fmt::format("chat template file '{}' does not parse: {}", st.opts.chat_template_file, e.what()));
    }
  }
  try {
    st.chat_template.emplace(jinja::Template::parse(tmpl.source));
    st.template_is_fallback = tmpl.is_fallback;
    st.chat_template_source = tmpl.source;
  } catch (const std::exception& e) {
    fmt::print(stderr, "serve: the model's chat template does not parse ({}); using ChatML\n", e.what());
    st.chat_template.emplace(jinja::Template::parse(jinja::chatml_template()));
    st.template_is_fallback = true;
    st.chat_template_source = jinja::chatml_template();
  }
  const jinja::SpecialTokenTexts special = jinja::special_tokens_from_gguf(st.model->gguf());
  st.template_vars = json::object();
  if (special.bos) st.template_vars["bos_token"] = *special.bos;
  if (special.eos) st.template_vars["eos_token"] = *special.eos;

  const int64_t n_ctx_train = st.model->hparams().n_ctx_train > 0 ? st.model->hparams().n_ctx_train : 2048;
  const int64_t total = st.opts.n_ctx > 0 ? st.opts.n_ctx : n_ctx_train;
  const int64_t per_slot = total / st.opts.n_parallel;
  if (per_slot < 8)
    fail("-c {} over -np {} slots leaves {} tokens per slot (need at least 8)", total, st.opts.n_parallel, per_slot);
  ContextParams cp;
  cp.n_ctx = per_slot * st.opts.n_parallel;
  cp.n_batch = st.opts.n_batch;
  cp.n_ubatch = st.opts.n_ubatch;
  cp.kv_type = st.opts.kv_type;
  cp.kv_type_v = st.opts.kv_type_v;
  cp.flash_attn = st.opts.flash_attn;
  cp.n_seq_max = int(st.opts.n_parallel);  // one recurrent state / one sliding window per slot
  fit_context_for_speculation(cp, st.opts.spec);
  st.ctx = std::make_unique<Context>(*st.model, cp);
  st.ctx->set_hooks(st.opts.hooks);
  EngineOptions eo;
  eo.n_slots = st.opts.n_parallel;
  eo.n_ctx_slot = per_slot;
  eo.prompt_similarity = st.opts.slot_prompt_similarity;
  eo.prompt_chunk = st.opts.prompt_chunk;
  eo.step_budget_ms = st.opts.step_budget_ms;
  eo.step_cost_ms = st.opts.step_cost_ms;
  eo.copy_prefixes = st.opts.copy_prefixes;
  eo.step_log = st.opts.step_log;
  eo.before_decode = st.opts.before_decode;
  eo.on_batch = st.opts.on_batch;
  eo.after_finish = st.opts.after_finish;
  eo.spec = st.opts.spec;
  if (eo.spec.type == SpecType::Draft) {  // one draft context, slot i drafting in its sequence i
    if (st.opts.model_draft.empty()) fail("speculative decoding with a draft model needs one (-md FILE)");
    check_speculation_supported(*st.ctx, "target");
    Registry* dreg = st.registry.get();
    if (st.opts.draft_threads > 0 || !st.opts.draft_backends.empty()) {
      const std::string& b = st.opts.draft_backends.empty() ? st.opts.backends : st.opts.draft_backends;
      st.draft_registry =
          make_registry(parse_backend_list(b == "none" ? "" : b),
                        st.opts.draft_threads > 0 ? st.opts.draft_threads : st.opts.threads, st.opts.backend_tuning);
      dreg = st.draft_registry.get();
    }
    st.draft_model = Model::load(st.opts.model_draft, *dreg, st.opts.load);
    check_draft_vocab(*st.vocab, Vocab::from_gguf(st.draft_model->gguf()));
    ContextParams dcp = cp;
    if (st.opts.draft_n_ctx > 0) dcp.n_ctx = st.opts.draft_n_ctx;
    if (st.opts.draft_kv_type) dcp.kv_type = *st.opts.draft_kv_type;
    if (st.opts.draft_kv_type_v) dcp.kv_type_v = st.opts.draft_kv_type_v;
    st.draft_ctx = std::make_unique<Context>(*st.draft_model, dcp);
    eo.draft_ctx = st.draft_ctx.get();
    fmt::print(stderr, "serve: draft model: KV cache {:.2f} MiB ({} cells shared by the slots, K {}, V {})\n",
               double(st.draft_ctx->kv_bytes()) / 1048576.0, st.draft_ctx->n_ctx(), dtype_name(dcp.kv_type),
               dtype_name(dcp.kv_type_v.value_or(dcp.kv_type)));
  }
  st.engine = std::make_unique<SlotEngine>(*st.ctx, *st.vocab, st.metrics, eo);
  st.model_id = st.opts.alias.empty() ? st.opts.model : st.opts.alias;
  if (st.opts.pooling.empty()) st.pooling = int(model_pooling(*st.model));
  st.ready = true;
}

void Server::shutdown() {
  State& st = *st_;
  std::call_once(st.shutdown_once, [&st] {
    st.stopping = true;
    // Every request gets its final event. `ready` (set after load() made the
    // engine) orders the read of `engine` after its write: a signal can call
    // this while load() runs (TSan).
    if (st.ready && st.engine) st.engine->shutdown();
    {
      std::unique_lock<std::mutex> lk(st.mu);  // let the streams write it
      st.cv.wait_for(lk, std::chrono::seconds(10), [&] { return st.in_flight == 0; });
    }
    st.http.stop();
  });
}

void Server::begin_drain() { st_->draining = true; }

int Server::in_flight() const {
  std::lock_guard<std::mutex> lk(st_->mu);
  return st_->in_flight;
}

void Server::wait() { st_->http.wait(); }

std::string Server::answer_raw(std::string_view raw) {
  State& st = *st_;
  std::call_once(st.routes_once, [&st] {
    install_routes(st);
    st.http.configure(http_options(st.opts));
  });
  return st.http.answer_raw(raw);
}

}  // namespace opal::server
