// OpenAI routes: POST /v1/chat/completions and POST /v1/completions (also
// without the /v1 prefix), non-streaming and SSE streaming, in OpenAI's shapes
// plus llama-server's `timings`.
#include <fmt/format.h>

#include "core/version.h"
#include "server/state.h"

namespace opal::server {
namespace {

struct OpenAiRequest {
  GenParams gen;
  bool stream = false;
  bool include_usage = false;
};

OpenAiRequest read_openai(Server::State& st, const json& body, std::vector<int32_t> prompt, bool chat) {
  OpenAiRequest r;
  r.gen.prompt = std::move(prompt);
  read_sampling(body, r.gen, st.vocab->n_tokens());
  if (auto v = get_bool(body, "stream")) r.stream = *v;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("'stream_options' must be an object", "stream_options");
    if (auto v = get_bool(*it, "include_usage")) r.include_usage = *v;
  }
  st.set_grammar(r.gen, read_grammar_text(body), "grammar");
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad_request(fmt::format("'tools' must be an array, got {}", it->type_name()), "tools");
    if (!it->empty()) bad_request("tool calls are not supported", "tools");
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null() && !it->is_string() && !it->is_object())
    bad_request(fmt::format("'tool_choice' must be a string or an object, got {}", it->type_name()), "tool_choice");
  if (chat) {
    r.gen.want_logprobs = get_bool(body, "logprobs").value_or(false);
    const auto top = get_int(body, "top_logprobs", 0, 20);
    if (top && !r.gen.want_logprobs) bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.gen.n_probs = int(top.value_or(0));
    r.gen.n_predict = read_n_predict(body, {"max_completion_tokens", "max_tokens", "n_predict"});
  } else {
    const auto lp = get_int(body, "logprobs", 0, 20);
    r.gen.want_logprobs = lp.has_value();
    r.gen.n_probs = int(lp.value_or(0));
    r.gen.n_predict = read_n_predict(body, {"max_tokens", "n_predict"});
  }
  if (r.gen.n_predict < -1) bad_request("'max_tokens' must be >= 0", "max_tokens");
  check_context(r.gen.prompt.size(), r.gen.n_predict, st.engine->n_ctx_slot(), "max_tokens",
                chat ? "messages" : "prompt");
  return r;
}

json base_object(Server::State& st, const std::string& id, const char* object) {
  json j;
  j["id"] = id;
  j["object"] = object;
  j["created"] = unix_time();
  j["model"] = st.model_id;
  j["system_fingerprint"] = std::string("opal-") + git_commit();
  return j;
}

// The end of a stream: the last chunk (with the finish reason) plus timings,
// the usage chunk when the client asked for it (stream_options.include_usage),
// and the [DONE] line.
std::string stream_end(Server::State& st, const std::string& id, const char* object, json last, const Event& ev,
                       bool include_usage) {
  last["timings"] = timings_json(ev.timings);
  add_done_error(last, ev);
  std::string out = sse(last);
  if (include_usage) {
    json u = base_object(st, id, object);
    u["choices"] = json::array();
    u["usage"] = usage_json(ev);
    out += sse(u);
  }
  return out + "data: [DONE]\n\n";
}

json legacy_logprobs(const Vocab& vocab, const std::vector<TokenOut>& tokens, size_t text_offset) {
  json tok = json::array(), lp = json::array(), top = json::array(), off = json::array();
  for (const TokenOut& t : tokens) {
    tok.push_back(vocab.token_to_piece(t.id, true));
    lp.push_back(t.logprob);
    json m = json::object();
    for (const TokenProb& p : t.top) m[vocab.token_to_piece(p.token, true)] = p.logprob;
    top.push_back(m);
    off.push_back(text_offset);
    text_offset += t.piece.size();
  }
  return json{{"tokens", tok}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

void handle_chat(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  const size_t max_bytes = st.ready ? st.engine->max_prompt_bytes() : SIZE_MAX;  // checked before tokenizing
  const json messages = normalize_messages(body, max_bytes);
  json kwargs = json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = *it;
  }
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
  const std::string prompt_text = st.render_chat(messages, true, kwargs);
  OpenAiRequest r = read_openai(st, body, tokenize_chat_prompt(prompt_text, *st.vocab, max_bytes), true);
  const std::string id = random_id("chatcmpl-");
  auto task = st.submit(std::move(r.gen));

  if (!r.stream) {
    InFlight guard(st, task);
    Collected c = collect(req, task);
    json out = base_object(st, id, "chat.completion");
    json choice;
    choice["index"] = 0;
    choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
    if (task->params.want_logprobs) {
      json content = json::array();
      for (const TokenOut& t : c.tokens) content.push_back(chat_logprob_entry(*st.vocab, t));
      choice["logprobs"] = json{{"content", content}};
    } else {
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = finish_reason(c.done);
    out["choices"] = json::array({choice});
    out["usage"] = usage_json(c.done);
    out["timings"] = timings_json(c.done.timings);
    add_done_error(out, c.done);
    res.set_content(dump(out), "application/json");
    return;
  }
  auto first = std::make_shared<bool>(true);
  const bool include_usage = r.include_usage, logprobs = task->params.want_logprobs;
  stream_response(st, res, task, [&st, id, first, include_usage, logprobs](const Event& ev) {
    std::string out;
    auto chunk = [&](json delta, json finish, const std::vector<TokenOut>* toks) {
      json j = base_object(st, id, "chat.completion.chunk");
      json choice{{"index", 0}, {"delta", std::move(delta)}};
      if (toks && logprobs) {
        json content = json::array();
        for (const TokenOut& t : *toks) content.push_back(chat_logprob_entry(*st.vocab, t));
        choice["logprobs"] = json{{"content", content}};
      } else {
        choice["logprobs"] = nullptr;
      }
      choice["finish_reason"] = std::move(finish);
      j["choices"] = json::array({choice});
      return j;
    };
    if (ev.kind == Event::Kind::Error) {
      return sse(event_error_object(ev)) + "data: [DONE]\n\n";
    }
    if (*first) {
      *first = false;
      out += sse(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    }
    if (!ev.text.empty() || (logprobs && !ev.tokens.empty()))
      out += sse(chunk(json{{"content", ev.text}}, nullptr, &ev.tokens));
    if (ev.kind == Event::Kind::Done)
      out += stream_end(st, id, "chat.completion.chunk", chunk(json::object(), finish_reason(ev), nullptr), ev,
                        include_usage);
    return out;
  });
}

void handle_completions(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
  auto p = body.find("prompt");
  if (p == body.end() || p->is_null()) bad_request("'prompt' is required", "prompt");
  if (get_bool(body, "echo").value_or(false)) bad_request("'echo' is not supported", "echo");
  if (auto s = get_string(body, "suffix"); s && !s->empty()) bad_request("'suffix' is not supported", "suffix");
  OpenAiRequest r = read_openai(st, body, read_prompt(*p, *st.vocab, "prompt", st.engine->max_prompt_bytes()), false);
  const std::string id = random_id("cmpl-");
  auto task = st.submit(std::move(r.gen));

  if (!r.stream) {
    InFlight guard(st, task);
    Collected c = collect(req, task);
    json out = base_object(st, id, "text_completion");
    json choice;
    choice["text"] = c.text;
    choice["index"] = 0;
    choice["logprobs"] = task->params.want_logprobs ? legacy_logprobs(*st.vocab, c.tokens, 0) : json(nullptr);
    choice["finish_reason"] = finish_reason(c.done);
    out["choices"] = json::array({choice});
    out["usage"] = usage_json(c.done);
    out["timings"] = timings_json(c.done.timings);
    add_done_error(out, c.done);
    res.set_content(dump(out), "application/json");
    return;
  }
  auto offset = std::make_shared<size_t>(0);
  const bool include_usage = r.include_usage, logprobs = task->params.want_logprobs;
  stream_response(st, res, task, [&st, id, offset, include_usage, logprobs](const Event& ev) {
    if (ev.kind == Event::Kind::Error) return sse(event_error_object(ev)) + "data: [DONE]\n\n";
    std::string out;
    auto chunk = [&](const std::string& text, json finish) {
      json j = base_object(st, id, "text_completion");
      json choice{{"text", text}, {"index", 0}};
      choice["logprobs"] =
          logprobs && !ev.tokens.empty() ? legacy_logprobs(*st.vocab, ev.tokens, *offset) : json(nullptr);
      choice["finish_reason"] = std::move(finish);
      j["choices"] = json::array({choice});
      return j;
    };
    if (!ev.text.empty() || (logprobs && !ev.tokens.empty())) out += sse(chunk(ev.text, nullptr));
    *offset += ev.text.size();
    if (ev.kind == Event::Kind::Done) {
      json last = chunk("", finish_reason(ev));
      last["choices"][0]["logprobs"] = nullptr;
      out += stream_end(st, id, "text_completion", std::move(last), ev, include_usage);
    }
    return out;
  });
}

}  // namespace

void register_openai_routes(Server::State& st) {
  auto chat = [&st](const HttpRequest& req, HttpResponse& res) { handle_chat(st, req, res); };
  auto completions = [&st](const HttpRequest& req, HttpResponse& res) { handle_completions(st, req, res); };
  st.http.Post("/v1/chat/completions", chat);
  st.http.Post("/chat/completions", chat);
  st.http.Post("/v1/completions", completions);
  st.http.Post("/completions", completions);
}

}  // namespace opal::server
