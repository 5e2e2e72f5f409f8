// The load-mode flags of every subcommand that loads a model, as llama.cpp
// users know them: `--lm MODE` (mmap, populate, read/none, lock/mlock, huge;
// core/mapped_file.h), `--no-mmap` (= read) and `--mlock` (= lock). Without
// any of them the default load mode is used (`huge` here: see docs/PERF.md).
#pragma once
#include <CLI/CLI.hpp>

#include "hub/hub.h"
#include "models/model.h"

namespace opal::tools {

// Adds the flags to a subcommand; they fill *opts while parsing. opts must
// outlive the parse (keep it in the subcommand's options struct).
void add_load_options(CLI::App* sub, LoadOptions* opts);

// Which model a subcommand runs when -m is not given.
enum class ModelDefault { BuiltIn, Required };

// `-m,--model FILE` (with the built-in model as default, or required), the
// model-by-name options (add_hub_options) and the load-mode flags: the model
// group of every subcommand that runs a model.
void add_model_options(CLI::App* sub, std::string* model, LoadOptions* load, ModelDefault dflt);

// `-hf user/repo[:quant]`, `-hff FILE`, `-mu URL`, `--hf-revision REV` and
// `-hft,--hf-token TOKEN` (hub/hub.h): before the subcommand runs, the model
// is fetched into the cache (or found there) and *model set to its path. At
// most one of -m, -hf and -mu. Returns where the -hf value is kept (owned by
// the subcommand), for a positional alias.
std::string* add_hub_options(CLI::App* sub, std::string* model);

// The hub settings of a subcommand that has add_hub_options' flags: the
// environment's (HF_ENDPOINT, HF_TOKEN, OPAL_CACHE, offline), with --hf-token
// over HF_TOKEN. For other downloads of the same command (-hfd).
hub::HubOptions hub_options(const CLI::App* sub);

}  // namespace opal::tools
