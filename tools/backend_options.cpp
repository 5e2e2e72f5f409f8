#include "tools/backend_options.h"

#include "backends/factory/backend_factory.h"

namespace opal::tools {

std::unique_ptr<Registry> BackendOptions::make_registry(int n_threads) const {
  return opal::make_registry(parse_backend_list(backends), n_threads);
}

void add_backend_option(CLI::App* sub, BackendOptions& o) {
  sub->add_option("--backend,--backends", o.backends,
                  "backends to use besides the CPU, comma-separated (known: " + backend_names() + ")");
}

}  // namespace opal::tools
