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

// The call format a model's chat template teaches: Hermes/Qwen3 `<tool_call>\n{"name", "arguments"}\n</tool_call>`,
// Mistral `[TOOL_CALLS] [{"name", "arguments"}, ...]`, Llama 3.x one bare `{"name", "parameters"}` object.
enum class ToolFormat { Hermes, Mistral, Llama };
// From the template's text: `[TOOL_CALLS]` -> Mistral; `<tool_call>` -> Hermes; Llama 3 headers with a
// "parameters" instruction -> Llama; otherwise Hermes (the ChatML fallback, which parse_tool_calls reads).
ToolFormat tool_format_of_template(const std::string& source);

struct ToolRequest {
  json tools = json::array();   // as given (rendered by the chat template)
  std::string choice = "auto";  // auto | none | required | function (forced_name)
  std::string forced_name;
  bool parallel = true;
  ToolFormat format = ToolFormat::Hermes;  // the form forced calls are generated in (tool_format_of_template)
  bool active() const { return !tools.empty() && choice != "none"; }
};

// Reads and checks tools / tool_choice / parallel_tool_calls (400 naming the field).
ToolRequest read_tools(const json& body);
// GBNF forcing one call (or several when parallel; Llama: one) in req.format's form, with each
// function's arguments following its `parameters` schema; "" for auto/none.
std::string tool_call_gbnf(const ToolRequest& req);
// tool_choice auto: the same calls grammar over every tool, for a lazy grammar triggered by `<tool_call>`
// (SamplerParams::grammar_trigger, as llama.cpp's grammar_lazy): free text until the model starts a
// Hermes/Qwen3 call, then the call must follow its function's schema. "" when not auto or not Hermes.
std::string tool_call_lazy_gbnf(const ToolRequest& req);

struct ParsedToolCalls {
  std::vector<json> calls;  // OpenAI shape {id, type: "function", function: {name, arguments (string)}}
  std::string content;      // the text outside the calls
  std::string error;        // a call marker was found but did not parse (then calls is empty)
};
ParsedToolCalls parse_tool_calls(const std::string& text);

// A streamed reply with tools, as OpenAI streams it: text becomes `content` deltas as it comes; a Hermes /
// Qwen3 `<tool_call>` becomes a `tool_calls` delta with its index, id, type and name as soon as
// `{"name": "...", "arguments":` has been generated, then `function.arguments` fragments as the arguments
// are generated (the text that might be the call's closing `}` or `</tool_call>` is held back until it is
// known). The other formats (Mistral `[TOOL_CALLS]`, Llama `<|python_tag|>`, a reply that is one bare JSON
// object) and a call whose keys come in another order are held and sent whole when complete, as
// parse_tool_calls() reads them. A call that turns out not to parse is sent as content and error() says why
// (arguments fragments already sent stay sent).
class ToolCallStream {
 public:
  // Released text; returns the deltas to send now, each {"content": ...} or {"tool_calls": [...]}.
  std::vector<json> feed(const std::string& text);
  // The reply ended: the deltas still held.
  std::vector<json> finish();
  int n_calls() const { return n_calls_; }
  const std::string& error() const { return error_; }

 private:
  enum class Mode { Text, Hold, Call, CallHold };
  void step(std::vector<json>& out, bool final);
  void close_call(std::vector<json>& out, const std::string& raw_args);
  void whole_calls(std::vector<json>& out, const std::string& text);
  Mode mode_ = Mode::Text;
  std::string pending_;     // Text / Hold: text not sent yet; Call / CallHold: the call after <tool_call>
  bool sent_text_ = false;  // some content was sent (a later '{' is not a bare-JSON reply)
  size_t args_begin_ = 0;   // Call: where the arguments start in pending_ (0: header not read yet)
  size_t args_sent_ = 0;    // Call: bytes of the arguments sent
  int n_calls_ = 0;
  std::string error_;
};

}  // namespace opal::server
