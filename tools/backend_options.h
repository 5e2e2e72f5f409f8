// `--backend NAME[,NAME]` for every subcommand that runs a model: picks the
// devices from the named factories (backends/factory/backend_factory.h). The
// CPU is always present (the fallback by role).
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "backends/factory/backend_factory.h"
#include "graph/registry.h"

namespace opal::tools {

struct BackendOptions {
  std::string backends;          // comma-separated names; empty = cpu only
  std::string et_fusion = "on";  // --et-fusion on|off (ET: one launch per graph run, or op by op)
  BackendTuning tuning() const;
  // The registry these options name (throws opal::Error for an unknown name).
  std::unique_ptr<Registry> make_registry(int n_threads) const;
};

// Adds --backend and the backends' own options (--et-fusion) to a subcommand.
void add_backend_option(CLI::App* sub, BackendOptions& o);
// Adds the backends' own options alone (subcommands with their own --backend).
void add_backend_tuning_options(CLI::App* sub, std::string& et_fusion);

}  // namespace opal::tools
