// Request parsing and validation for the HTTP routes: typed field readers that
// turn a wrong type or value into a 400 with an OpenAI-style error object
//   {"error": {"message", "type": "invalid_request_error", "param", "code": 400}}
// plus the shared pieces of every completion request (sampling fields, stop
// strings, prompts given as text or token ids, chat messages).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/slots.h"
#include "tokenizer/vocab.h"

namespace opal::server {

using json = nlohmann::ordered_json;

// Per-request caps (each bounds work done per generated token).
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 256;

// An error with an HTTP status and an OpenAI error type.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string type, const std::string& message, std::string param = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;
  std::string param;
  json extra = json::object();  // members added beside "error" in the body (e.g. "usage")
};

// OpenAI usage of a request's final event (Done or Error): prompt, completion, total and cached tokens.
json usage_json(const Event& ev);
// The error object for an engine Error event (its status: 500 or 503), with
// the request's usage beside it: {"error": {...}, "usage": {...}}.
json event_error_object(const Event& ev);

[[noreturn]] void bad_request(const std::string& message, const std::string& param = {});
json error_object(int status, const std::string& type, const std::string& message, const std::string& param = {});
// JSON text; invalid UTF-8 in strings (a token cut inside a character) becomes U+FFFD.
std::string dump(const json& j);

// The body as a JSON object (400 for malformed JSON or a non-object).
json parse_body(const std::string& body);

// Typed optional fields: absent or null -> nullopt; wrong type -> 400 naming the field.
std::optional<bool> get_bool(const json& o, const char* key);
std::optional<int64_t> get_int(const json& o, const char* key, int64_t lo, int64_t hi);
std::optional<double> get_number(const json& o, const char* key);
std::optional<std::string> get_string(const json& o, const char* key);

// Sampling fields (temperature, top_k, top_p, min_p, typical_p, seed, penalties,
// logit_bias, stop, ignore_eos, cache_prompt) into `gen`; validated against n_vocab.
void read_sampling(const json& body, GenParams& gen, int32_t n_vocab);
// The generation length: the first present of `keys`; -1 when none is given.
int32_t read_n_predict(const json& body, std::initializer_list<const char*> keys);

// The structured-output fields as GBNF text ("" when the request has none):
// OpenAI's response_format {type: text | json_object | json_schema {schema,
// strict}} and llama-server's `grammar` (GBNF) / `json_schema`. A schema Opal
// cannot compile, or two of them at once, is a 400 naming the field.
std::string read_grammar_text(const json& body);

// A prompt given as a string, an array of token ids, a mixed array of strings
// and ids, or a one-element array holding either. Text is tokenized with
// parse_special, and BOS is added when the vocabulary asks for it.
// Text longer than max_bytes in total (SlotEngine::max_prompt_bytes(): more
// than a slot can hold) is refused before any of it is tokenized.
std::vector<int32_t> read_prompt(const json& value, const Vocab& vocab, const char* param, size_t max_bytes = SIZE_MAX);
// Tokenizes a rendered chat prompt (BOS added once even if the template wrote it);
// refuses text over max_bytes first, as read_prompt.
std::vector<int32_t> tokenize_chat_prompt(const std::string& text, const Vocab& vocab, size_t max_bytes = SIZE_MAX);
// 400 naming `param` when n_bytes > max_bytes.
void check_prompt_bytes(size_t n_bytes, size_t max_bytes, const std::string& param);

// Checks the `messages` array (roles, content strings or text parts) and returns
// it with content parts joined into strings, as the chat templates expect.
// Content over max_bytes in total is refused (before the template renders it).
json normalize_messages(const json& body, size_t max_bytes = SIZE_MAX);

// 400 when the prompt leaves no room in a slot, or n_predict would run past it.
void check_context(size_t n_prompt, int32_t n_predict, int64_t n_ctx_slot, const char* predict_param,
                   const char* prompt_param = "prompt");

}  // namespace opal::server
