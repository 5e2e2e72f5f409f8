#include "tools/backend_options.h"

#include "backends/factory/backend_factory.h"

namespace opal::tools {

BackendTuning BackendOptions::tuning() const {
  BackendTuning t;
  t.et_fusion = et_fusion != "off";
  return t;
}

std::unique_ptr<Registry> BackendOptions::make_registry(int n_threads) const {
  return opal::make_registry(parse_backend_list(backends), n_threads, tuning());
}

void add_backend_tuning_options(CLI::App* sub, std::string& et_fusion) {
  sub->add_option("--et-fusion", et_fusion,
                  "ET: 'on' (default) runs each run of consecutive ET nodes as one fused launch (device-side "
                  "barriers), 'off' launches op by op")
      ->check(CLI::IsMember({"on", "off"}));
}

void add_backend_option(CLI::App* sub, BackendOptions& o) {
  sub->add_option("--backend,--backends", o.backends,
                  "backends to use besides the CPU, comma-separated (known: " + backend_names() + ")");
  add_backend_tuning_options(sub, o.et_fusion);
}

}  // namespace opal::tools
