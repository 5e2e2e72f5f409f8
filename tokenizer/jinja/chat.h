// Chat templates: turn a conversation (OpenAI/transformers message list) into
// the prompt text a model expects, by rendering the model's Jinja template the
// way transformers' apply_chat_template does. Used by `opal template`,
// `opal chat` and `opal serve`.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "core/gguf.h"
#include "tokenizer/jinja/template.h"

namespace opal::jinja {

// Renders `template_src` with the variables transformers passes:
// messages, add_generation_prompt, tools (null unless given), documents (null),
// then every key of `extra_vars` (bos_token, eos_token, tools, enable_thinking,
// date_string, ...; a key in extra_vars replaces a default). Throws
// TemplateError; raise_exception('msg') gives kind() "TemplateError" and
// message() "msg".
std::string apply_chat_template(const std::string& template_src, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                const RenderOptions& options = {});

// Same, with a template parsed once (Template::parse) and rendered many times.
std::string apply_chat_template(const Template& parsed, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                const RenderOptions& options = {});

// The ChatML template used when a model has none (transformers' former default).
const std::string& chatml_template();

struct ModelChatTemplate {
  std::string source;
  bool is_fallback = false;  // true: the model had no template; `source` is ChatML
};

// `tokenizer.chat_template` of a GGUF file, or ChatML when absent or empty.
// `name` selects a named variant `tokenizer.chat_template.<name>` (error when absent).
ModelChatTemplate chat_template_from_gguf(const gguf::File& file, const std::string& name = "");

struct SpecialTokenTexts {
  std::optional<std::string> bos, eos;
};
// The texts of tokenizer.ggml.bos_token_id / eos_token_id in tokenizer.ggml.tokens.
SpecialTokenTexts special_tokens_from_gguf(const gguf::File& file);

}  // namespace opal::jinja
