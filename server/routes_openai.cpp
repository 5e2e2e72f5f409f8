// OpenAI routes: POST /v1/chat/completions and POST /v1/completions (also
// without the /v1 prefix), non-streaming and SSE streaming, in OpenAI's shapes
// plus llama-server's `timings`.
#include <fmt/format.h>

#include "core/version.h"
#include "server/state.h"
#include "server/tool_calls.h"

namespace opal::server {
namespace {

struct OpenAiRequest {
  GenParams gen;
  bool stream = false;
  bool include_usage = false;
};

OpenAiRequest read_openai(Server::State& st, const json& body, std::vector<int32_t> prompt, bool chat,
                          const ToolRequest* tools = nullptr) {
  OpenAiRequest r;
  r.gen.prompt = std::move(prompt);
  read_sampling(body, r.gen, st.vocab->n_tokens());
  if (auto v = get_bool(body, "stream")) r.stream = *v;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("'stream_options' must be an object", "stream_options");
    if (auto v = get_bool(*it, "include_usage")) r.include_usage = *v;
  }
  std::string gbnf = read_grammar_text(body);
  const std::string tool_gbnf = tools ? tool_call_gbnf(*tools) : "";
  if (!tool_gbnf.empty()) {
    if (!gbnf.empty()) bad_request("a required tool call cannot be combined with a response_format", "tool_choice");
    gbnf = tool_gbnf;
  }
  st.set_grammar(r.gen, gbnf, tool_gbnf.empty() ? "grammar" : "tools");
  if (tools && gbnf.empty()) {  // tool_choice auto: a lazy grammar from the call marker on
    try {
      const std::string lazy = tool_call_lazy_gbnf(*tools);
      if (!lazy.empty()) {
        st.set_grammar(r.gen, lazy, "tools");
        r.gen.sampling.grammar_trigger = "<tool_call>";
      }
    } catch (const HttpError&) {  // a schema the converter refuses: the calls are parsed unconstrained, as before
    }
  }
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
  json messages = normalize_messages(body, max_bytes);
  if (st.template_is_fallback) {
    // ChatML knows no tool_calls: an assistant turn that only called tools is
    // written as the Hermes text the model would have produced.
    for (json& m : messages) {
      if (m.value("role", "") != "assistant" || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
      if (m.contains("content") && m["content"].is_string() && !m["content"].get<std::string>().empty()) continue;
      std::string text;
      for (const json& tc : m["tool_calls"]) {
        if (!tc.is_object() || !tc.contains("function")) continue;
        const json& f = tc["function"];
        json call{{"name", f.value("name", "")}};
        const std::string args =
            f.contains("arguments") && f["arguments"].is_string() ? f["arguments"].get<std::string>() : "{}";
        call["arguments"] = json::parse(args, nullptr, false);
        if (call["arguments"].is_discarded()) call["arguments"] = args;
        if (!text.empty()) text += '\n';
        text += "<tool_call>\n";
        text += call.dump();
        text += "\n</tool_call>";
      }
      m["content"] = text;
    }
  }
  json kwargs = json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = *it;
  }
  ToolRequest tools = read_tools(body);
  tools.format = tool_format_of_template(st.chat_template_source);  // forced calls in the model's own form
  if (tools.active()) kwargs["tools"] = tools.tools;                // the model's template renders them
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
  const std::string prompt_text = st.render_chat(messages, true, kwargs);
  OpenAiRequest r = read_openai(st, body, tokenize_chat_prompt(prompt_text, *st.vocab, max_bytes), true, &tools);
  const bool use_tools = tools.active();
  const std::string id = random_id("chatcmpl-");
  auto task = st.submit(std::move(r.gen));

  if (!r.stream) {
    InFlight guard(st, task);
    Collected c = collect(req, task);
    json out = base_object(st, id, "chat.completion");
    json choice;
    choice["index"] = 0;
    choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
    bool called = false;
    if (use_tools) {
      ParsedToolCalls calls = parse_tool_calls(c.text);
      if (!calls.calls.empty()) {
        choice["message"]["content"] = calls.content.empty() ? json(nullptr) : json(calls.content);
        choice["message"]["tool_calls"] = calls.calls;
        called = true;
      } else if (!calls.error.empty()) {
        choice["note"] =
            "the reply looked like a tool call but did not parse (" + calls.error + "); returned as content";
      }
    }
    if (task->params.want_logprobs) {
      json content = json::array();
      for (const TokenOut& t : c.tokens) content.push_back(chat_logprob_entry(*st.vocab, t));
      choice["logprobs"] = json{{"content", content}};
    } else {
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = called && c.done.stop_type == StopType::Eos ? "tool_calls" : finish_reason(c.done);
    out["choices"] = json::array({choice});
    out["usage"] = usage_json(c.done);
    out["timings"] = timings_json(c.done.timings);
    add_done_error(out, c.done);
    res.set_content(dump(out), "application/json");
    return;
  }
  auto first = std::make_shared<bool>(true);
  auto tool_stream = std::make_shared<ToolCallStream>();
  const bool include_usage = r.include_usage, logprobs = task->params.want_logprobs;
  stream_response(st, res, task, [&st, id, first, include_usage, logprobs, use_tools, tool_stream](const Event& ev) {
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
    if (use_tools) {  // content and calls as they are generated (ToolCallStream, server/tool_calls.h)
      for (json& d : tool_stream->feed(ev.text)) out += sse(chunk(std::move(d), nullptr, nullptr));
      if (ev.kind != Event::Kind::Done) return out;
      for (json& d : tool_stream->finish()) out += sse(chunk(std::move(d), nullptr, nullptr));
      json last = chunk(json::object(),
                        tool_stream->n_calls() > 0 && ev.stop_type == StopType::Eos ? "tool_calls" : finish_reason(ev),
                        nullptr);
      if (!tool_stream->error().empty())
        last["choices"][0]["note"] =
            "the reply looked like a tool call but did not parse (" + tool_stream->error() + "); returned as content";
      return out + stream_end(st, id, "chat.completion.chunk", std::move(last), ev, include_usage);
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
  // OpenAI's legacy completions API has no tool calls, and llama-server handles tools on chat only.
  for (const char* k : {"tools", "tool_choice", "functions"})
    if (auto it = body.find(k); it != body.end() && !it->is_null())
      bad_request(fmt::format("'{}' is not supported on /v1/completions: tool calls need a chat, use "
                              "/v1/chat/completions",
                              k),
                  k);
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
