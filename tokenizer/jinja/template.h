// Jinja templates as Hugging Face chat templates use them, rendered the way
// Python's jinja2 renders them in transformers (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now and
// transformers' tojson). Output is byte-identical to jinja2 3.1 for the
// language subset described in docs/jinja.md.
//
//   auto t = opal::jinja::Template::parse(src);        // throws TemplateError
//   std::string s = t.render({{"messages", msgs}});    // throws TemplateError
#pragma once
#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/error.h"

namespace opal::jinja {

struct Stmt;

struct RenderOptions {
  // The instant strftime_now() formats, in local time. Unset: the current time
  // (what transformers does).
  std::optional<std::time_t> now;
};

class Template {
 public:
  static Template parse(std::string_view source);
  // `vars` must be a JSON object; each key becomes a template variable. A key
  // that is absent is undefined (not the same as null).
  std::string render(const nlohmann::ordered_json& vars) const;
  std::string render(const nlohmann::ordered_json& vars, const RenderOptions& options) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace opal::jinja
