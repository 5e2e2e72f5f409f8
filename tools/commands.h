// Each `opal` subcommand lives in tools/cmd_<name>.cpp and registers itself on
// the CLI11 app through one of these functions (listed in main.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace opal::tools {

// A subcommand's work, run after parsing. Returns the process exit code.
using Action = std::function<int()>;
// Registers `sub` with its action; main() runs the action of the chosen one.
void set_action(CLI::App* sub, Action action);
// Work to do before the action of `sub` (e.g. fetching the model -hf names);
// runs in registration order, and its opal::Error ends the program as the action's would.
void add_pre_action(CLI::App* sub, std::function<void()> f);

void add_inspect_command(CLI::App& app);
void add_rocket_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_ops_command(CLI::App& app);
void add_conformance_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_bench_spec_command(CLI::App& app);
void add_pull_command(CLI::App& app);
void add_embed_command(CLI::App& app);
void add_split_command(CLI::App& app);

}  // namespace opal::tools
