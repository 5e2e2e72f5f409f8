// Chat-template helpers (see chat.h).
#include "tokenizer/jinja/chat.h"

#include <fmt/format.h>

namespace opal::jinja {

std::string apply_chat_template(const std::string& template_src, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                const RenderOptions& options) {
  return apply_chat_template(Template::parse(template_src), messages, add_generation_prompt, extra_vars, options);
}

std::string apply_chat_template(const Template& parsed, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                const RenderOptions& options) {
  if (!extra_vars.is_null() && !extra_vars.is_object()) fail("chat template variables must be a JSON object");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (extra_vars.is_object())
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) vars[it.key()] = it.value();
  return parsed.render(vars, options);
}

const std::string& chatml_template() {
  static const std::string t =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return t;
}

ModelChatTemplate chat_template_from_gguf(const gguf::File& file, const std::string& name) {
  const std::string key = name.empty() ? "tokenizer.chat_template" : "tokenizer.chat_template." + name;
  const gguf::Value* v = file.find(key);
  if (!v) {
    if (!name.empty()) fail("{}: no chat template named '{}' (key {} is absent)", file.path(), name, key);
    return {chatml_template(), true};
  }
  const std::string& s = v->as_string(key);
  if (s.empty()) return {chatml_template(), true};
  return {s, false};
}

SpecialTokenTexts special_tokens_from_gguf(const gguf::File& file) {
  SpecialTokenTexts out;
  const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::ARRAY) return out;
  auto text = [&](const char* key) -> std::optional<std::string> {
    const gguf::Value* id = file.find(key);
    if (!id || !id->is_integer()) return std::nullopt;
    const int64_t i = id->as_int(key);
    if (i < 0 || uint64_t(i) >= tokens->array.size()) return std::nullopt;
    const gguf::Value& t = tokens->array[size_t(i)];
    if (t.type != gguf::ValueType::STRING) return std::nullopt;
    return t.str;
  };
  out.bos = text("tokenizer.ggml.bos_token_id");
  out.eos = text("tokenizer.ggml.eos_token_id");
  return out;
}

}  // namespace opal::jinja
