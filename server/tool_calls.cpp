// See tool_calls.h. Calls are recognised by their markers; the JSON inside is
// parsed with nlohmann::json, and `arguments` is returned as a JSON string, as
// OpenAI does. Text that has a marker but no valid call is returned as
// content with `error` set, never dropped.
#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "sampling/grammar.h"

namespace opal::server {
namespace {

// Most calls one forced reply may hold (the grammar bounds it, so a model that
// keeps calling still ends).
constexpr int kMaxParallelCalls = 4;

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += digits[rng() % 62];
  return id;
}

// {"name", "arguments"|"parameters"} -> an OpenAI call; false if it is not one.
bool to_call(const json& j, std::vector<json>& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  json args = json::object();
  if (auto it = j.find("arguments"); it != j.end()) {
    args = *it;
  } else if (auto p = j.find("parameters"); p != j.end()) {
    args = *p;
  }
  const std::string arg_text = args.is_string() ? args.get<std::string>() : args.dump();
  out.push_back(json{{"id", call_id()},
                     {"type", "function"},
                     {"function", json{{"name", j["name"].get<std::string>()}, {"arguments", arg_text}}}});
  return true;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

ToolRequest read_tools(const json& body) {
  ToolRequest r;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad_request(fmt::format("'tools' must be an array, got {}", it->type_name()), "tools");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
        bad_request(where + " must be {\"type\": \"function\", \"function\": {...}}", "tools");
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        bad_request(where + ".function.name must be a non-empty string", "tools");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        bad_request(where + ".function.parameters must be a JSON Schema object", "tools");
    }
    r.tools = *it;
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      r.choice = it->get<std::string>();
      if (r.choice != "auto" && r.choice != "none" && r.choice != "required")
        bad_request(fmt::format("'tool_choice' '{}' is not one of auto, none, required", r.choice), "tool_choice");
    } else if (it->is_object()) {
      const auto f = it->find("function");
      if (f == it->end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
        bad_request("'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tool_choice");
      r.choice = "function";
      r.forced_name = (*f)["name"].get<std::string>();
      bool found = false;
      for (const json& t : r.tools) found |= t["function"]["name"] == r.forced_name;
      if (!found)
        bad_request(fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.forced_name), "tool_choice");
    } else {
      bad_request(fmt::format("'tool_choice' must be a string or an object, got {}", it->type_name()), "tool_choice");
    }
  }
  if ((r.choice == "required" || r.choice == "function") && r.tools.empty())
    bad_request("'tool_choice' requires a call but 'tools' is empty", "tool_choice");
  if (auto v = get_bool(body, "parallel_tool_calls")) r.parallel = *v;
  return r;
}

namespace {

// The calls grammar in the request's format: calls of the allowed functions (all, or the named one).
std::string calls_gbnf(const ToolRequest& req) {
  // One schema for a call: {"name": const, KEY: parameters} per allowed function (KEY: "parameters" in
  // Llama 3.x's form, else "arguments").
  const char* key = req.format == ToolFormat::Llama ? "parameters" : "arguments";
  json any = json::array();
  for (const json& t : req.tools) {
    const json& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (req.choice == "function" && name != req.forced_name) continue;
    json params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json::object();
    if (params.empty()) params = json{{"type", "object"}};
    any.push_back(json{{"type", "object"},
                       {"properties", json{{"name", json{{"const", name}}}, {key, params}}},
                       {"required", json::array({"name", key})},
                       {"additionalProperties", false}});
  }
  const json schema = any.size() == 1 ? any[0] : json{{"anyOf", any}};
  std::string g;
  try {
    g = json_schema_to_gbnf(schema.dump());
  } catch (const Error& e) {
    bad_request(fmt::format("tools: a function's parameters: {}", e.what()), "tools");
  }
  // The converter's start rule becomes `call`; calls are wrapped in the format's markers.
  if (g.rfind("root ::= ", 0) != 0) fail("tool_call_gbnf: unexpected grammar start");
  g = "call ::= " + g.substr(9);
  const std::string more = "{0," + std::to_string(kMaxParallelCalls - 1) + "}";
  switch (req.format) {
    case ToolFormat::Mistral:  // [TOOL_CALLS] [{...}, {...}]
      return "root ::= \"[TOOL_CALLS] [\" call " + (req.parallel ? "(\", \" call)" + more : std::string()) +
             " \"]\"\n" + g;
    case ToolFormat::Llama:  // one bare {"name": ..., "parameters": ...} (Llama 3.x templates take one call)
      return "root ::= call\n" + g;
    case ToolFormat::Hermes: break;
  }
  const std::string one = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
  return "root ::= " + one + (req.parallel ? " (\"\\n\" " + one + ")" + more : "") + "\n" + g;
}

}  // namespace

ToolFormat tool_format_of_template(const std::string& source) {
  if (source.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::Mistral;
  if (source.find("<tool_call>") != std::string::npos) return ToolFormat::Hermes;
  if (source.find("<|start_header_id|>") != std::string::npos && source.find("\"parameters\"") != std::string::npos)
    return ToolFormat::Llama;
  return ToolFormat::Hermes;
}

std::string tool_call_gbnf(const ToolRequest& req) {
  if (req.choice != "required" && req.choice != "function") return "";
  return calls_gbnf(req);
}

std::string tool_call_lazy_gbnf(const ToolRequest& req) {
  if (!req.active() || req.choice != "auto" || req.format != ToolFormat::Hermes) return "";
  return calls_gbnf(req);
}

ParsedToolCalls parse_tool_calls(const std::string& text) {
  ParsedToolCalls out;
  auto fail_with = [&](const std::string& why) {
    out.calls.clear();
    out.content = text;
    out.error = why;
    return out;
  };
  // Qwen3 / Hermes.
  if (text.find("<tool_call>") != std::string::npos) {
    std::string content;
    size_t pos = 0;
    for (;;) {
      const size_t b = text.find("<tool_call>", pos);
      if (b == std::string::npos) {
        content += text.substr(pos);
        break;
      }
      content += text.substr(pos, b - pos);
      const size_t e = text.find("</tool_call>", b);
      const std::string inner = text.substr(b + 11, e == std::string::npos ? std::string::npos : e - b - 11);
      const json j = json::parse(trim(inner), nullptr, false);
      if (j.is_discarded() || !to_call(j, out.calls)) return fail_with("a <tool_call> block is not a JSON call");
      if (e == std::string::npos) {
        pos = text.size();
        break;
      }
      pos = e + 12;
    }
    out.content = trim(content);
    return out;
  }
  // Mistral.
  if (const size_t m = text.find("[TOOL_CALLS]"); m != std::string::npos) {
    const json j = json::parse(trim(text.substr(m + 12)), nullptr, false);
    if (j.is_discarded()) return fail_with("[TOOL_CALLS] is not followed by JSON");
    const json arr = j.is_array() ? j : json::array({j});
    for (const json& c : arr)
      if (!to_call(c, out.calls)) return fail_with("[TOOL_CALLS] holds something that is not a call");
    out.content = trim(text.substr(0, m));
    return out;
  }
  // Llama 3.x: <|python_tag|> or a bare JSON call as the whole reply.
  std::string body = text;
  const size_t py = text.find("<|python_tag|>");
  if (py != std::string::npos) body = text.substr(py + 14);
  const std::string t = trim(body);
  if (!t.empty() && t.front() == '{') {
    const json j = json::parse(t, nullptr, false);
    if (!j.is_discarded() && to_call(j, out.calls)) {
      out.content = py == std::string::npos ? "" : trim(text.substr(0, py));
      return out;
    }
    if (py != std::string::npos) return fail_with("<|python_tag|> is not followed by a JSON call");
  }
  out.content = text;
  return out;
}

namespace {

const char* const kMarkers[] = {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"};

// The longest suffix of s that is a proper prefix of `marker`.
size_t partial_suffix(const std::string& s, const std::string& marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.compare(s.size() - k, k, marker, 0, k) == 0) return k;
  return 0;
}

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// Reads `{"name": "NAME", "arguments":` at the start of s. Returns the offset after the colon and sets
// name; 0: more text is needed; npos: s does not start that way.
size_t read_call_head(const std::string& s, std::string& name) {
  constexpr size_t npos = std::string::npos;
  size_t i = 0;
  auto literal = [&](const std::string& lit) -> int {  // 1 matched, 0 more text needed, -1 mismatch
    i = skip_ws(s, i);
    const size_t n = std::min(lit.size(), s.size() - i);
    if (s.compare(i, n, lit, 0, n) != 0) return -1;
    if (n < lit.size()) return 0;
    i += lit.size();
    return 1;
  };
  for (const char* part : {"{", "\"name\"", ":", "\""})
    if (const int r = literal(part); r <= 0) return r < 0 ? npos : 0;
  const size_t end = s.find('"', i);  // function names are identifiers: no escapes
  if (end == npos) return 0;
  name = s.substr(i, end - i);
  if (name.empty() || name.find('\\') != npos) return npos;
  i = end + 1;
  for (const char* part : {",", "\"arguments\"", ":"})
    if (const int r = literal(part); r <= 0) return r < 0 ? npos : 0;
  return i;
}

// How much of a call's arguments text may be sent: all but a tail of whitespace and '}' possibly followed by
// the start of `</tool_call>` (the call's closing).
size_t sendable_args(const std::string& a) {
  size_t n = a.size() - partial_suffix(a, "</tool_call>");
  while (n > 0 && (a[n - 1] == '}' || a[n - 1] == ' ' || a[n - 1] == '\n' || a[n - 1] == '\t' || a[n - 1] == '\r')) --n;
  return n;
}

json content_delta(const std::string& s) { return json{{"content", s}}; }

}  // namespace

std::vector<json> ToolCallStream::feed(const std::string& text) {
  std::vector<json> out;
  pending_ += text;
  step(out, false);
  return out;
}

std::vector<json> ToolCallStream::finish() {
  std::vector<json> out;
  step(out, true);
  return out;
}

void ToolCallStream::whole_calls(std::vector<json>& out, const std::string& text) {
  ParsedToolCalls p = parse_tool_calls(text);
  if (!p.content.empty()) out.push_back(content_delta(p.content));
  if (!p.error.empty()) error_ = p.error;
  for (json& c : p.calls) {
    c["index"] = n_calls_++;
    out.push_back(json{{"tool_calls", json::array({c})}});
  }
}

void ToolCallStream::close_call(std::vector<json>& out, const std::string& raw) {
  // raw: the call's text after the arguments' colon, up to </tool_call> (or the end of the reply).
  std::string a = raw.substr(std::min(raw.size(), skip_ws(raw, 0)));
  a.erase(a.find_last_not_of(" \t\r\n") + 1);
  if (!a.empty() && a.back() == '}') a.pop_back();  // the call object's own closing brace
  a.erase(a.find_last_not_of(" \t\r\n") + 1);
  const json j = json::parse(a, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "a <tool_call> block's arguments are not a JSON object";
    out.push_back(content_delta("<tool_call>" + pending_.substr(0, args_begin_) + raw + "</tool_call>"));
    return;
  }
  if (a.size() > args_sent_)
    out.push_back(json{
        {"tool_calls", json::array({{{"index", n_calls_}, {"function", {{"arguments", a.substr(args_sent_)}}}}})}});
  ++n_calls_;
}

void ToolCallStream::step(std::vector<json>& out, bool final) {
  for (;;) {
    switch (mode_) {
      case Mode::Hold:
        if (final) whole_calls(out, pending_);
        if (final) pending_.clear();
        return;
      case Mode::Text: {
        const size_t lead = pending_.find_first_not_of(" \t\r\n");
        if (!sent_text_ && n_calls_ == 0 && lead != std::string::npos && pending_[lead] == '{') {
          mode_ = Mode::Hold;  // perhaps a bare JSON call (Llama 3.x): known only at the end
          continue;
        }
        size_t at = std::string::npos;
        const char* marker = nullptr;
        for (const char* m : kMarkers)
          if (const size_t p = pending_.find(m); p < at) at = p, marker = m;
        if (marker) {
          const std::string before = pending_.substr(0, at);
          if (before.find_first_not_of(" \t\r\n") != std::string::npos) {
            out.push_back(content_delta(before));
            sent_text_ = true;
          }
          if (std::string(marker) == "<tool_call>") {
            pending_ = pending_.substr(at + 11);
            mode_ = Mode::Call;
            args_begin_ = args_sent_ = 0;
          } else {
            pending_ = pending_.substr(at);
            mode_ = Mode::Hold;
          }
          continue;
        }
        if (lead == std::string::npos) {  // only whitespace so far: sent with the text after it, if any
          if (final) pending_.clear();
          return;
        }
        size_t keep = 0;
        if (!final)
          for (const char* m : kMarkers) keep = std::max(keep, partial_suffix(pending_, m));
        const std::string now = pending_.substr(0, pending_.size() - keep);
        if (now.find_first_not_of(" \t\r\n") == std::string::npos) {
          if (final) pending_.clear();
          return;  // whitespace (perhaps between two calls): held until text follows it
        }
        out.push_back(content_delta(now));
        sent_text_ = true;
        pending_ = pending_.substr(pending_.size() - keep);
        return;
      }
      case Mode::CallHold: {
        const size_t e = pending_.find("</tool_call>");
        if (e == std::string::npos && !final) return;
        const std::string block = pending_.substr(0, e);
        whole_calls(out, "<tool_call>" + block + "</tool_call>");
        pending_ = e == std::string::npos ? "" : pending_.substr(e + 12);
        mode_ = Mode::Text;
        if (final && pending_.empty()) return;
        continue;
      }
      case Mode::Call: {
        if (args_begin_ == 0) {
          std::string name;
          const size_t head = read_call_head(pending_, name);
          if (head == std::string::npos || (head == 0 && final)) {
            mode_ = Mode::CallHold;  // another key order, or not a call: sent whole (or as content) at its end
            continue;
          }
          if (head == 0) return;
          args_begin_ = head;
          out.push_back(json{{"tool_calls", json::array({{{"index", n_calls_},
                                                          {"id", call_id()},
                                                          {"type", "function"},
                                                          {"function", {{"name", name}, {"arguments", ""}}}}})}});
        }
        if (args_sent_ == 0) args_begin_ = skip_ws(pending_, args_begin_);  // the arguments start at their '{'
        const size_t e = pending_.find("</tool_call>", args_begin_);
        if (e != std::string::npos || final) {
          close_call(out, pending_.substr(args_begin_, e == std::string::npos ? std::string::npos : e - args_begin_));
          pending_ = e == std::string::npos ? "" : pending_.substr(e + 12);
          mode_ = Mode::Text;
          if (final && pending_.empty()) return;
          continue;
        }
        const std::string a = pending_.substr(args_begin_);
        const size_t n = sendable_args(a);
        if (n > args_sent_) {
          out.push_back(json{
              {"tool_calls", json::array({{{"index", n_calls_},
                                           {"function", {{"arguments", a.substr(args_sent_, n - args_sent_)}}}}})}});
          args_sent_ = n;
        }
        return;
      }
    }
  }
}

}  // namespace opal::server
