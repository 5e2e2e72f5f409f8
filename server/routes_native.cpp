// llama-server's native routes: GET /health, /v1/models, /metrics, /props and
// POST /completion, /tokenize, /detokenize, /apply-template.
#include <fmt/format.h>

#include "core/version.h"
#include "server/state.h"

namespace opal::server {
namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

void require_ready(const Server::State& st) {
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
}

void handle_completion(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  require_ready(st);
  auto p = body.find("prompt");
  if (p == body.end() || p->is_null()) bad_request("'prompt' is required", "prompt");
  GenParams gen;
  gen.prompt = read_prompt(*p, *st.vocab, "prompt", st.engine->max_prompt_bytes());
  read_sampling(body, gen, st.vocab->n_tokens());
  gen.n_predict = read_n_predict(body, {"n_predict", "max_tokens"});
  gen.n_probs = int(get_int(body, "n_probs", 0, 100).value_or(0));
  gen.want_logprobs = gen.n_probs > 0;
  st.set_grammar(gen, read_grammar_text(body), "grammar");
  check_context(gen.prompt.size(), gen.n_predict, st.engine->n_ctx_slot(), "n_predict");
  const bool stream = get_bool(body, "stream").value_or(false);
  auto task = st.submit(std::move(gen));

  auto final_object = [&st](const Event& done, const std::string& content, const std::vector<TokenOut>& toks,
                            const std::vector<int32_t>& prompt, int n_probs) {
    json j;
    j["index"] = 0;
    j["content"] = content;
    json ids = json::array();
    for (const TokenOut& t : toks) ids.push_back(t.id);
    j["tokens"] = ids;
    j["id_slot"] = done.slot;
    j["stop"] = true;
    j["model"] = st.model_id;
    j["tokens_predicted"] = done.timings.predicted_n;
    j["tokens_evaluated"] = int64_t(prompt.size());
    j["has_new_line"] = content.find('\n') != std::string::npos;
    j["truncated"] = false;
    j["stop_type"] = stop_type_name(done.stop_type);
    j["stopping_word"] = done.stopping_word;
    j["tokens_cached"] = done.n_past;
    j["timings"] = timings_json(done.timings);
    add_done_error(j, done);
    if (n_probs > 0) {
      json probs = json::array();
      for (const TokenOut& t : toks) probs.push_back(native_prob_entry(*st.vocab, t));
      j["completion_probabilities"] = probs;
    }
    return j;
  };

  if (!stream) {
    InFlight guard(st, task);
    Collected c = collect(req, task);
    res.set_content(dump(final_object(c.done, c.text, c.tokens, task->params.prompt, task->params.n_probs)),
                    "application/json");
    return;
  }
  const int n_probs = task->params.n_probs;
  const std::vector<int32_t> prompt = task->params.prompt;
  stream_response(st, res, task, [&st, n_probs, prompt, final_object](const Event& ev) {
    if (ev.kind == Event::Kind::Error) return sse(event_error_object(ev));
    std::string out;
    if (!ev.text.empty() || !ev.tokens.empty()) {
      json j;
      j["index"] = 0;
      j["content"] = ev.text;
      json ids = json::array();
      for (const TokenOut& t : ev.tokens) ids.push_back(t.id);
      j["tokens"] = ids;
      j["stop"] = false;
      if (n_probs > 0) {
        json probs = json::array();
        for (const TokenOut& t : ev.tokens) probs.push_back(native_prob_entry(*st.vocab, t));
        j["completion_probabilities"] = probs;
      }
      out += sse(j);
    }
    if (ev.kind == Event::Kind::Done) out += sse(final_object(ev, "", {}, prompt, 0));
    return out;
  });
}

void handle_tokenize(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  require_ready(st);
  const auto content = get_string(body, "content");
  if (!content) bad_request("'content' (a string) is required", "content");
  const bool add_special = get_bool(body, "add_special").value_or(false);
  const bool parse_special = get_bool(body, "parse_special").value_or(true);
  const bool with_pieces = get_bool(body, "with_pieces").value_or(false);
  const std::vector<int32_t> toks = st.vocab->tokenize(*content, add_special, parse_special);
  json out = json::array();
  for (int32_t t : toks) {
    if (!with_pieces) {
      out.push_back(t);
      continue;
    }
    const std::string piece = st.vocab->token_to_piece(t, true);
    json p;
    if (valid_utf8(piece)) {
      p = piece;
    } else {
      p = json::array();
      for (unsigned char c : piece) p.push_back(int(c));
    }
    out.push_back(json{{"id", t}, {"piece", p}});
  }
  res.set_content(dump(json{{"tokens", out}}), "application/json");
}

void handle_detokenize(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  require_ready(st);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) bad_request("'tokens' (an array of token ids) is required", "tokens");
  std::vector<int32_t> ids;
  for (const json& t : *it) {
    if (!t.is_number_integer()) bad_request("'tokens' must hold integers", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= st.vocab->n_tokens())
      bad_request(fmt::format("token id {} is out of range (n_vocab = {})", id, st.vocab->n_tokens()), "tokens");
    ids.push_back(int32_t(id));
  }
  res.set_content(dump(json{{"content", st.vocab->detokenize(ids, false, true)}}), "application/json");
}

void handle_apply_template(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  require_ready(st);
  const json messages = normalize_messages(body);
  json kwargs = json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && it->is_object()) kwargs = *it;
  const bool add_gen = get_bool(body, "add_generation_prompt").value_or(true);
  res.set_content(dump(json{{"prompt", st.render_chat(messages, add_gen, kwargs)}}), "application/json");
}

}  // namespace

void register_native_routes(Server::State& st) {
  auto health = [&st](const HttpRequest&, HttpResponse& res) {
    if (!st.ready) {
      res.status = 503;
      res.set_content(dump(error_object(503, "unavailable_error", "Loading model")), "application/json");
      return;
    }
    if (st.draining) {  // a load balancer takes this replica out of rotation
      res.status = 503;
      res.set_content(dump(error_object(503, "unavailable_error", "Draining")), "application/json");
      return;
    }
    res.set_content(dump(json{{"status", "ok"}}), "application/json");
  };
  st.http.Get("/health", health, Dispatch::Inline);
  st.http.Get("/v1/health", health, Dispatch::Inline);

  auto models = [&st](const HttpRequest&, HttpResponse& res) {
    require_ready(st);
    const HParams& hp = st.model->hparams();
    int64_t n_params = 0, size = 0;
    for (const auto& [name, t] : st.model->weights()) {
      n_params += t->n_elements();
      size += int64_t(t->nbytes());
    }
    json meta{{"vocab_type", st.vocab->type_name()},
              {"n_vocab", hp.n_vocab},
              {"n_ctx_train", hp.n_ctx_train},
              {"n_embd", hp.n_embd},
              {"n_params", n_params},
              {"size", size}};
    json m{{"id", st.model_id}, {"object", "model"}, {"created", st.created}, {"owned_by", "llamacpp"}, {"meta", meta}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  };
  st.http.Get("/v1/models", models, Dispatch::Inline);
  st.http.Get("/models", models, Dispatch::Inline);

  st.http.Get(
      "/metrics",
      [&st](const HttpRequest&, HttpResponse& res) {
        if (!st.opts.metrics)
          throw HttpError(501, "not_supported_error",
                          "This server does not support metrics endpoint (start it with --metrics)");
        res.set_content(st.metrics.render() + st.http.render_metrics(), "text/plain; version=0.0.4");
      },
      Dispatch::Inline);

  st.http.Get(
      "/props",
      [&st](const HttpRequest&, HttpResponse& res) {
        require_ready(st);
        json j;
        j["total_slots"] = st.engine->n_slots();
        j["model_path"] = st.opts.model;
        j["n_ctx"] = st.engine->n_ctx_slot();
        j["chat_template"] = st.chat_template_source;
        j["chat_template_is_fallback"] = st.template_is_fallback;
        j["build_info"] = std::string("opal ") + git_commit();
        res.set_content(dump(j), "application/json");
      },
      Dispatch::Inline);

  auto completion = [&st](const HttpRequest& req, HttpResponse& res) { handle_completion(st, req, res); };
  st.http.Post("/completion", completion);
  st.http.Post("/tokenize", [&st](const HttpRequest& req, HttpResponse& res) { handle_tokenize(st, req, res); });
  st.http.Post("/detokenize", [&st](const HttpRequest& req, HttpResponse& res) { handle_detokenize(st, req, res); });
  st.http.Post("/apply-template",
               [&st](const HttpRequest& req, HttpResponse& res) { handle_apply_template(st, req, res); });
}

}  // namespace opal::server
