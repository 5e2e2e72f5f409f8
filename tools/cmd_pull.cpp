// `opal pull -hf user/repo[:quant] [-hff FILE] | -mu URL`: fetches a model
// into the cache (hub/hub.h, docs/models-by-name.md) without running it, and
// prints its local path. `opal pull user/repo[:quant]` is short for -hf.
#include <fmt/format.h>

#include <memory>

#include "core/error.h"
#include "tools/commands.h"
#include "tools/load_options.h"

namespace opal::tools {

void add_pull_command(CLI::App& app) {
  struct PullOptions {
    std::string model;
  };
  auto o = std::make_shared<PullOptions>();
  CLI::App* sub = app.add_subcommand("pull", "Download a model by name (-hf) or URL (-mu) into the cache");
  std::string* hf = add_hub_options(sub, &o->model);
  sub->add_option("name", *hf, "user/repo[:quant] (same as -hf)");
  sub->footer(
      "Environment: HF_ENDPOINT (or MODEL_ENDPOINT), HF_TOKEN, OPAL_CACHE (default ~/.cache/opal), "
      "OPAL_OFFLINE=1 or HF_HUB_OFFLINE=1.");
  set_action(sub, [o] {
    if (o->model.empty()) fail("pull: give -hf user/repo[:quant], user/repo[:quant] or -mu URL");
    fmt::print("{}\n", o->model);
    return 0;
  });
}

}  // namespace opal::tools
