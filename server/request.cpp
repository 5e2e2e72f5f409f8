#include "server/request.h"

#include "sampling/grammar.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace opal::server {

void bad_request(const std::string& message, const std::string& param) {
  throw HttpError(400, "invalid_request_error", message, param);
}

json error_object(int status, const std::string& type, const std::string& message, const std::string& param) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = status;
  return json{{"error", e}};
}

json usage_json(const Event& ev) {
  json u;
  u["completion_tokens"] = ev.timings.predicted_n;
  u["prompt_tokens"] = ev.n_prompt;
  u["total_tokens"] = ev.n_prompt + ev.timings.predicted_n;
  u["prompt_tokens_details"] = json{{"cached_tokens", ev.timings.cache_n}};
  return u;
}

json event_error_object(const Event& ev) {
  json j = error_object(ev.error_status, ev.error_status == 503 ? "unavailable_error" : "server_error", ev.error);
  j["usage"] = usage_json(ev);
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& first) {
    // Parse again (only on this error path) with a callback that tracks the
    // top-level key being read, so that an error inside a field's value (a
    // number beyond double's range: `1e400`) names that field.
    int depth = 0;
    std::string key;
    auto track = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) ++depth;
      else if (ev == json::parse_event_t::object_end || ev == json::parse_event_t::array_end) --depth;
      else if (ev == json::parse_event_t::key && depth == 1) key = parsed.get<std::string>();
      return true;
    };
    try {
      const json again = json::parse(body, track);  // throws again: only `key` matters
    } catch (const json::exception&) {
    }
    const std::string what = first.what();
    const size_t at = what.find("number overflow");
    if (at != std::string::npos)
      bad_request(fmt::format("{}the body holds a number out of range ({})",
                              key.empty() ? "" : "'" + key + "': ", what.substr(at)),
                  key);
    bad_request(fmt::format("the request body is not valid JSON: {}", what), depth >= 1 ? key : std::string());
  }
  if (!j.is_object()) bad_request("the request body must be a JSON object");
  return j;
}

namespace {

const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string type_name(const json& v) { return v.type_name(); }

}  // namespace

std::optional<bool> get_bool(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(fmt::format("'{}' must be a boolean, got {}", key, type_name(*v)), key);
  return v->get<bool>();
}

std::optional<int64_t> get_int(const json& o, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::trunc(v->get<double>()) == v->get<double>()) {
    const double d = v->get<double>();
    if (d < double(lo) || d > double(hi))
      bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, d), key);
    x = int64_t(d);
  } else {
    bad_request(fmt::format("'{}' must be an integer, got {}", key, v->is_number() ? "a fraction" : type_name(*v)),
                key);
  }
  if (x < lo || x > hi) bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x), key);
  return x;
}

std::optional<double> get_number(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(fmt::format("'{}' must be a number, got {}", key, type_name(*v)), key);
  const double x = v->get<double>();
  if (!std::isfinite(x)) bad_request(fmt::format("'{}' must be finite", key), key);
  return x;
}

std::optional<std::string> get_string(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(fmt::format("'{}' must be a string, got {}", key, type_name(*v)), key);
  return v->get<std::string>();
}

void read_sampling(const json& body, GenParams& gen, int32_t n_vocab) {
  SamplerParams& s = gen.sampling;
  if (auto n = get_int(body, "n", 0, 1 << 20); n && *n != 1)
    bad_request(fmt::format("only n = 1 is supported, got {}", *n), "n");
  // Each range is checked here, so that the error names its field.
  auto number_in = [&](const char* key, double lo, double hi) -> std::optional<float> {
    auto v = get_number(body, key);
    if (v && (*v < lo || *v > hi)) bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, *v), key);
    return v ? std::optional<float>(float(*v)) : std::nullopt;
  };
  constexpr double kBig = 1e6;  // beyond any useful temperature or penalty, and inside float
  if (auto v = number_in("temperature", -kBig, kBig)) s.temp = *v;
  if (auto v = get_int(body, "top_k", -1, n_vocab)) s.top_k = int32_t(*v);
  if (auto v = number_in("top_p", 0, 1)) s.top_p = *v;
  if (auto v = number_in("min_p", 0, 1)) s.min_p = *v;
  if (auto v = number_in("typical_p", 0, 1)) s.typical_p = *v;
  if (auto v = number_in("repeat_penalty", 0, kBig)) {
    if (*v <= 0) bad_request("'repeat_penalty' must be > 0 (1 = off)", "repeat_penalty");
    s.repeat_penalty = *v;
  }
  if (auto v = get_int(body, "repeat_last_n", -1, 1 << 20)) s.repeat_last_n = int32_t(*v);
  if (auto v = number_in("presence_penalty", -kBig, kBig)) s.presence_penalty = *v;
  if (auto v = number_in("frequency_penalty", -kBig, kBig)) s.frequency_penalty = *v;
  if (auto v = get_int(body, "seed", -1, int64_t(kRandomSeed))) s.seed = *v < 0 ? kRandomSeed : uint32_t(*v);
  if (auto v = get_bool(body, "ignore_eos")) gen.ignore_eos = *v;
  if (auto v = get_bool(body, "cache_prompt")) gen.cache_prompt = *v;

  if (const json* stop = field(body, "stop")) {
    std::vector<std::string> words;
    if (stop->is_string()) {
      words.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings)
        bad_request(fmt::format("'stop' may hold at most {} strings, got {}", kMaxStopStrings, stop->size()), "stop");
      for (const json& w : *stop) {
        if (!w.is_string()) bad_request("'stop' must be a string or an array of strings", "stop");
        words.push_back(w.get<std::string>());
      }
    } else {
      bad_request(fmt::format("'stop' must be a string or an array of strings, got {}", stop->type_name()), "stop");
    }
    for (const std::string& w : words) {
      if (w.empty()) bad_request("'stop' strings must not be empty", "stop");
      if (w.size() > kMaxStopBytes)
        bad_request(fmt::format("'stop' strings may be at most {} bytes, got one of {}", kMaxStopBytes, w.size()),
                    "stop");
    }
    gen.stop = std::move(words);
  }

  if (const json* bias = field(body, "logit_bias")) {
    // At most one entry per vocabulary token (the sampler applies every entry
    // at every token); repeated tokens add up, as in llama.cpp.
    if ((bias->is_object() || bias->is_array()) && bias->size() > size_t(n_vocab))
      bad_request(fmt::format("'logit_bias' has {} entries; at most n_vocab = {}", bias->size(), n_vocab),
                  "logit_bias");
    std::vector<float> merged;
    std::vector<char> seen;
    std::vector<int32_t> order;
    auto add = [&](const json& id, const json& b) {
      int64_t tok = -1;
      if (id.is_number_integer()) tok = id.get<int64_t>();
      else if (id.is_string()) {
        try {
          size_t used = 0;
          tok = std::stoll(id.get<std::string>(), &used);
          if (used != id.get<std::string>().size()) tok = -1;
        } catch (const std::exception&) {
          tok = -1;
        }
      }
      if (tok < 0 || tok >= n_vocab)
        bad_request(fmt::format("'logit_bias' token {} is out of range", id.dump()), "logit_bias");
      float v = 0;
      if (b.is_boolean() && !b.get<bool>()) v = -std::numeric_limits<float>::infinity();
      else if (b.is_number() && std::fabs(b.get<double>()) <= 1e6) v = float(b.get<double>());
      else if (b.is_number())
        bad_request(
            fmt::format("'logit_bias' values must be in [-1e6, 1e6] (or false to ban a token), got {}", b.dump()),
            "logit_bias");
      else bad_request("'logit_bias' values must be numbers (or false to ban a token)", "logit_bias");
      if (merged.empty()) {
        merged.assign(size_t(n_vocab), 0.0f);
        seen.assign(size_t(n_vocab), 0);
      }
      if (!seen[size_t(tok)]) order.push_back(int32_t(tok));
      seen[size_t(tok)] = 1;
      merged[size_t(tok)] += v;
    };
    if (bias->is_object()) {
      for (auto it = bias->begin(); it != bias->end(); ++it) add(json(it.key()), it.value());
    } else if (bias->is_array()) {
      for (const json& pair : *bias) {
        if (!pair.is_array() || pair.size() != 2) bad_request("'logit_bias' pairs must be [token, bias]", "logit_bias");
        add(pair[0], pair[1]);
      }
    } else {
      bad_request("'logit_bias' must be an object or an array of [token, bias] pairs", "logit_bias");
    }
    for (int32_t tok : order)
      if (merged[size_t(tok)] != 0.0f) s.logit_bias.emplace_back(tok, merged[size_t(tok)]);
  }
  try {
    validate(s, n_vocab);
  } catch (const Error& e) {
    bad_request(e.what());
  }
}

int32_t read_n_predict(const json& body, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = get_int(body, k, -1, std::numeric_limits<int32_t>::max())) return int32_t(*v);
  return -1;
}

namespace {

void check_token(const json& t, const Vocab& vocab, const char* param) {
  const int64_t id = t.get<int64_t>();
  if (id < 0 || id >= vocab.n_tokens())
    bad_request(fmt::format("token id {} in '{}' is out of range (n_vocab = {})", id, param, vocab.n_tokens()), param);
}

}  // namespace

void check_prompt_bytes(size_t n_bytes, size_t max_bytes, const std::string& param) {
  if (n_bytes > max_bytes)
    bad_request(fmt::format("'{}' holds {} bytes of text; a slot's context cannot hold more than {} (raise -c or "
                            "lower -np)",
                            param, n_bytes, max_bytes),
                param);
}

std::vector<int32_t> read_prompt(const json& value, const Vocab& vocab, const char* param, size_t max_bytes) {
  if (value.is_string()) {
    check_prompt_bytes(value.get_ref<const std::string&>().size(), max_bytes, param);
    return vocab.tokenize(value.get<std::string>(), true, true);
  }
  if (!value.is_array())
    bad_request(fmt::format("'{}' must be a string or an array, got {}", param, value.type_name()), param);
  if (value.size() == 1 && (value[0].is_string() || value[0].is_array()))
    return read_prompt(value[0], vocab, param, max_bytes);
  // Text is checked in total before any of it is tokenized.
  size_t n_bytes = 0;
  for (const json& e : value)
    if (e.is_string()) n_bytes += e.get_ref<const std::string&>().size();
  check_prompt_bytes(n_bytes, max_bytes, param);
  std::vector<int32_t> out;
  bool first = true;
  for (const json& e : value) {
    if (e.is_number_integer()) {
      check_token(e, vocab, param);
      out.push_back(int32_t(e.get<int64_t>()));
    } else if (e.is_string()) {
      const auto toks = vocab.tokenize(e.get<std::string>(), first, true);
      out.insert(out.end(), toks.begin(), toks.end());
    } else if (e.is_array()) {
      bad_request(fmt::format("'{}' holds several prompts; one request takes one", param), param);
    } else {
      bad_request(fmt::format("'{}' elements must be strings or token ids, got {}", param, e.type_name()), param);
    }
    first = false;
  }
  if (out.empty()) bad_request(fmt::format("'{}' is empty", param), param);
  return out;
}

std::vector<int32_t> tokenize_chat_prompt(const std::string& text, const Vocab& vocab, size_t max_bytes) {
  check_prompt_bytes(text.size(), max_bytes, "messages");
  std::vector<int32_t> toks = vocab.tokenize(text, true, true);
  if (toks.size() >= 2 && vocab.bos() >= 0 && toks[0] == vocab.bos() && toks[1] == vocab.bos())
    toks.erase(toks.begin());
  return toks;
}

namespace {

// `where` names the schema's place in the body; the error's param is its top-level field.
std::string schema_gbnf(const json& schema, const std::string& where) {
  const std::string param = where.substr(0, where.find('.'));
  if (!schema.is_object() && !schema.is_boolean())
    bad_request(fmt::format("'{}' must be a JSON Schema object, got {}", where, schema.type_name()), param);
  try {
    return json_schema_to_gbnf(schema.dump());
  } catch (const Error& e) {
    bad_request(fmt::format("{}: {}", where, e.what()), param);
  }
}

}  // namespace

std::string read_grammar_text(const json& body) {
  std::string gbnf;
  std::string from;
  auto take = [&](std::string text, const char* param) {
    if (!from.empty()) bad_request(fmt::format("'{}' and '{}' cannot be given together", from, param), param);
    gbnf = std::move(text);
    from = param;
  };
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object())
      bad_request(fmt::format("'response_format' must be an object, got {}", it->type_name()), "response_format");
    const auto t = it->find("type");
    if (t != it->end() && !t->is_null() && !t->is_string())
      bad_request("'response_format.type' must be a string", "response_format");
    const std::string type = t != it->end() && t->is_string() ? t->get<std::string>() : "text";
    if (type == "json_object") {
      // llama-server also takes a schema here.
      if (auto sc = it->find("schema"); sc != it->end() && !sc->is_null()) {
        take(schema_gbnf(*sc, "response_format.schema"), "response_format");
      } else {
        take(json_object_gbnf(), "response_format");
      }
    } else if (type == "json_schema") {
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object())
        bad_request("response_format 'json_schema' needs a 'json_schema' object", "response_format");
      if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean())
        bad_request("'response_format.json_schema.strict' must be a boolean", "response_format");
      auto sc = js->find("schema");
      if (sc == js->end() || sc->is_null())
        bad_request("'response_format.json_schema.schema' is required", "response_format");
      take(schema_gbnf(*sc, "response_format.json_schema.schema"), "response_format");
    } else if (type != "text") {
      bad_request(fmt::format("response_format '{}' is not supported (text, json_object, json_schema)", type),
                  "response_format");
    }
  }
  if (auto it = body.find("json_schema"); it != body.end() && !it->is_null()) {
    take(schema_gbnf(*it, "json_schema"), "json_schema");
  }
  if (auto it = body.find("grammar"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) bad_request(fmt::format("'grammar' must be a string, got {}", it->type_name()), "grammar");
    if (!it->get<std::string>().empty()) take(it->get<std::string>(), "grammar");
  }
  return gbnf;
}

json normalize_messages(const json& body, size_t max_bytes) {
  const json* m = field(body, "messages");
  if (!m) bad_request("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) bad_request("'messages' must be a non-empty array", "messages");
  json out = json::array();
  size_t n_bytes = 0;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad_request(where + " must be an object", where);
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) bad_request(where + ".role must be a string", where + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      bad_request(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", where, r),
                  where + ".role");
    json copy = msg;
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      if (r != "assistant") bad_request(where + ".content is required", where + ".content");
    } else if (content->is_array()) {
      std::string text;
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad_request(where + ".content parts must be {\"type\": \"text\", \"text\": ...} (only text is supported)",
                      where + ".content");
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      copy["content"] = text;
    } else if (!content->is_string()) {
      bad_request(
          fmt::format("{}.content must be a string or an array of text parts, got {}", where, content->type_name()),
          where + ".content");
    }
    if (const auto c = copy.find("content"); c != copy.end() && c->is_string())
      n_bytes += c->get_ref<const std::string&>().size();
    out.push_back(std::move(copy));
  }
  check_prompt_bytes(n_bytes, max_bytes, "messages");
  return out;
}

void check_context(size_t n_prompt, int32_t n_predict, int64_t n_ctx_slot, const char* predict_param,
                   const char* prompt_param) {
  if (int64_t(n_prompt) >= n_ctx_slot)
    bad_request(fmt::format("the prompt has {} tokens but a slot's context holds {} (raise -c or lower -np)", n_prompt,
                            n_ctx_slot),
                prompt_param);
  if (n_predict > 0 && int64_t(n_prompt) + n_predict > n_ctx_slot)
    bad_request(fmt::format("'{}' = {} plus the prompt's {} tokens exceeds a slot's context of {} tokens",
                            predict_param, n_predict, n_prompt, n_ctx_slot),
                predict_param);
}

}  // namespace opal::server
