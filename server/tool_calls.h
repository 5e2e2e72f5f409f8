// Tool calls on /v1/chat/completions: the request's `tools`, `tool_choice` and
// `parallel_tool_calls`, the grammar that forces a call (tool_choice required
// or a named function), and parsing calls out of the model's text
// (Qwen3/Hermes `<tool_call>{...}</tool_call>`, Mistral `[TOOL_CALLS][...]`,
// Llama 3.x `<|python_tag|>{...}` or a bare {"name", "parameters"} object).
#pragma once
#include <string>
#include <vector>

#include "server/request.h"

namespace opal::server {

struct ToolRequest {
  json tools = json::array();   // as given (rendered by the chat template)
  std::string choice = "auto";  // auto | none | required | function (forced_name)
  std::string forced_name;
  bool parallel = true;
  bool active() const { return !tools.empty() && choice != "none"; }
};

// Reads and checks tools / tool_choice / parallel_tool_calls (400 naming the field).
ToolRequest read_tools(const json& body);
// GBNF forcing one call (or several when parallel) in Hermes form, with each
// function's arguments following its `parameters` schema; "" for auto/none.
std::string tool_call_gbnf(const ToolRequest& req);

struct ParsedToolCalls {
  std::vector<json> calls;  // OpenAI shape {id, type: "function", function: {name, arguments (string)}}
  std::string content;      // the text outside the calls
  std::string error;        // a call marker was found but did not parse (then calls is empty)
};
ParsedToolCalls parse_tool_calls(const std::string& text);

}  // namespace opal::server
