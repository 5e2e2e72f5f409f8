// See tool_calls.h. Calls are recognised by their markers; the JSON inside is
// parsed with nlohmann::json, and `arguments` is returned as a JSON string, as
// OpenAI does. Text that has a marker but no valid call is returned as
// content with `error` set, never dropped.
#include "server/tool_calls.h"

#include <fmt/format.h>

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

std::string tool_call_gbnf(const ToolRequest& req) {
  if (req.choice != "required" && req.choice != "function") return "";
  // One schema for a call: {"name": const, "arguments": parameters} per allowed function.
  json any = json::array();
  for (const json& t : req.tools) {
    const json& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (req.choice == "function" && name != req.forced_name) continue;
    json params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json::object();
    if (params.empty()) params = json{{"type", "object"}};
    any.push_back(json{{"type", "object"},
                       {"properties", json{{"name", json{{"const", name}}}, {"arguments", params}}},
                       {"required", json::array({"name", "arguments"})},
                       {"additionalProperties", false}});
  }
  const json schema = any.size() == 1 ? any[0] : json{{"anyOf", any}};
  std::string g;
  try {
    g = json_schema_to_gbnf(schema.dump());
  } catch (const Error& e) {
    bad_request(fmt::format("tools: a function's parameters: {}", e.what()), "tools");
  }
  // The converter's start rule becomes `call`; calls are wrapped in Hermes markers.
  if (g.rfind("root ::= ", 0) != 0) fail("tool_call_gbnf: unexpected grammar start");
  g = "call ::= " + g.substr(9);
  const std::string one = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
  return "root ::= " + one +
         (req.parallel ? " (\"\\n\" " + one + "){0," + std::to_string(kMaxParallelCalls - 1) + "}" : "") + "\n" + g;
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

}  // namespace opal::server
