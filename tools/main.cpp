// `opal`: one binary, many subcommands (see tools/commands.h).
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/version.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"

namespace opal::tools {
namespace {
std::map<CLI::App*, Action>& actions() {
  static std::map<CLI::App*, Action> a;
  return a;
}
}  // namespace
std::map<CLI::App*, std::vector<std::function<void()>>>& pre_actions() {
  static std::map<CLI::App*, std::vector<std::function<void()>>> a;
  return a;
}
void set_action(CLI::App* sub, Action action) { actions()[sub] = std::move(action); }
void add_pre_action(CLI::App* sub, std::function<void()> f) { pre_actions()[sub].push_back(std::move(f)); }
}  // namespace opal::tools

int main(int argc, char** argv) {
  using namespace opal::tools;
  CLI::App app{"Opal: run GGUF language models on CPUs and open accelerators"};
  app.set_version_flag("--version", std::string("opal ") + opal::git_commit());
  app.require_subcommand(1);
  app.fallthrough(false);

  add_inspect_command(app);
  add_rocket_command(app);
  add_tokenize_command(app);
  add_template_command(app);
  add_quantize_command(app);
  add_logits_command(app);
  add_run_command(app);
  add_perplexity_command(app);
  add_ops_command(app);
  add_conformance_command(app);
  add_chat_command(app);
  add_serve_command(app);
  add_synth_command(app);
  add_bench_command(app);
  add_bench_spec_command(app);
  add_pull_command(app);
  add_embed_command(app);
  add_split_command(app);

  // llama.cpp's `-ub`, `-ctk`, `-np`... become `--ub`, `--ctk`, `--np`.
  const std::vector<std::string> args = map_llama_flags(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const opal::Error& e) {  // a flag's own check (e.g. --isa, --batch-order) failed while parsing
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, action] : actions())
      if (sub->parsed()) {
        for (auto& f : pre_actions()[sub]) f();
        return action();
      }
  } catch (const opal::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "error: no action for this subcommand\n");
  return 2;
}
