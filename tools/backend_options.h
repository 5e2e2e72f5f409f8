// `--backend NAME[,NAME]` for every subcommand that runs a model: picks the
// devices from the named factories (backends/factory/backend_factory.h). The
// CPU is always present (the fallback by role).
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "graph/registry.h"

namespace opal::tools {

struct BackendOptions {
  std::string backends;  // comma-separated names; empty = cpu only
  // The registry these options name (throws opal::Error for an unknown name).
  std::unique_ptr<Registry> make_registry(int n_threads) const;
};

// Adds --backend to a subcommand.
void add_backend_option(CLI::App* sub, BackendOptions& o);

}  // namespace opal::tools
