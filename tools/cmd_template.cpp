// `opal template (-m MODEL | --template FILE) --messages FILE.json
//   [--add-generation-prompt] [--var NAME=JSON ...] [--bos TEXT] [--eos TEXT] [--now TIME]`
// Renders a chat template the way transformers' apply_chat_template does and
// writes the prompt to stdout byte for byte (no trailing newline added).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "tokenizer/jinja/chat.h"
#include "tools/commands.h"
#include "tools/load_options.h"

namespace opal::tools {
namespace {

struct TemplateOptions {
  std::string model;
  std::string template_file;
  std::string template_name;
  std::string messages_file;
  bool add_generation_prompt = false;
  std::vector<std::string> vars;
  std::string bos, eos, now;
  bool bos_set = false, eos_set = false;
};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open {}", what, path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

nlohmann::ordered_json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON: {}", what, e.what());
  }
}

// "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM[:SS]" in local time.
std::time_t parse_now(const std::string& s) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  const int n = std::sscanf(s.c_str(), "%d-%d-%d%*1[T ]%d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
  if (!(n == 3 || n >= 5) || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 ||
      sec > 60)
    fail("--now: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, got '{}'", s);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

int run_template(const TemplateOptions& o) {
  if (o.model.empty() && o.template_file.empty()) fail("give a model (-m MODEL) or a template file (--template FILE)");
  std::string source;
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (!o.model.empty()) {
    gguf::File f = gguf::File::open(o.model);
    if (o.template_file.empty()) {
      jinja::ModelChatTemplate t = jinja::chat_template_from_gguf(f, o.template_name);
      source = std::move(t.source);
      if (t.is_fallback)
        std::fprintf(stderr, "note: %s has no tokenizer.chat_template; using ChatML\n", o.model.c_str());
    }
    const jinja::SpecialTokenTexts tokens = jinja::special_tokens_from_gguf(f);
    if (tokens.bos) vars["bos_token"] = *tokens.bos;
    if (tokens.eos) vars["eos_token"] = *tokens.eos;
  }
  if (!o.template_file.empty()) source = read_file(o.template_file, "--template");
  if (o.bos_set) vars["bos_token"] = o.bos;
  if (o.eos_set) vars["eos_token"] = o.eos;

  nlohmann::ordered_json messages =
      parse_json(read_file(o.messages_file, "--messages"), "--messages " + o.messages_file);
  if (messages.is_object() && messages.contains("messages")) {
    // An OpenAI-style request body: take its messages (and tools).
    if (messages.contains("tools")) vars["tools"] = messages["tools"];
    messages = nlohmann::ordered_json(messages["messages"]);
  }
  if (!messages.is_array()) fail("--messages {}: expected a JSON list of messages", o.messages_file);

  for (const std::string& v : o.vars) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) fail("--var '{}': expected NAME=JSON", v);
    const std::string name = v.substr(0, eq);
    vars[name] = parse_json(v.substr(eq + 1), "--var " + name);
  }

  jinja::RenderOptions render;
  if (!o.now.empty()) render.now = parse_now(o.now);
  const std::string out = jinja::apply_chat_template(source, messages, o.add_generation_prompt, vars, render);
  if (!out.empty() && std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) fail("writing to stdout failed");
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  CLI::App* sub = app.add_subcommand("template", "Render a chat template for a conversation (prompt text to stdout)");
  sub->add_option("-m,--model", o->model, "GGUF model whose tokenizer.chat_template and bos/eos tokens to use");
  add_hub_options(sub, &o->model);
  sub->add_option("--template,--chat-template-file", o->template_file, "Jinja template file (overrides the model's)");
  sub->add_option("--template-name", o->template_name, "Named template variant tokenizer.chat_template.NAME");
  sub->add_option("--messages", o->messages_file, "JSON file: a list of messages, or an object with \"messages\"")
      ->required();
  sub->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant turn's opening");
  sub->add_option("--var", o->vars, "Template variable NAME=JSON (e.g. enable_thinking=false, tools=[...])");
  sub->add_option("--bos", o->bos, "bos_token text (default: the model's)")->each([o](const std::string&) {
    o->bos_set = true;
  });
  sub->add_option("--eos", o->eos, "eos_token text (default: the model's)")->each([o](const std::string&) {
    o->eos_set = true;
  });
  sub->add_option("--now", o->now, "Time strftime_now() formats: YYYY-MM-DD[THH:MM:SS] (default: now)");
  set_action(sub, [o] { return run_template(*o); });
}

}  // namespace opal::tools
