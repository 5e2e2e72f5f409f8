#include "tools/load_options.h"

#include <memory>

#include "core/error.h"
#include "core/mapped_file.h"
#include "hub/hub.h"
#include "tools/commands.h"

namespace opal::tools {

void add_load_options(CLI::App* sub, LoadOptions* opts) {
  sub->add_option_function<std::string>(
         "--lm,--load-mode",
         [opts](const std::string& name) {
           try {
             opts->load_mode = load_mode_from_name(name);
           } catch (const std::exception& e) {
             throw CLI::ValidationError("--lm", e.what());
           }
         },
         std::string("how weights are loaded: mmap, populate, read (none), lock (mlock), huge (default: ") +
             load_mode_name(default_load_mode()) + ")")
      ->type_name("MODE");
  sub->add_flag_callback(
      "--no-mmap", [opts] { opts->load_mode = LoadMode::Read; }, "read the weights into memory (load mode read)");
  sub->add_flag_callback(
      "--mlock", [opts] { opts->load_mode = LoadMode::Lock; },
      "map, populate and lock the weights in memory (load mode lock)");
  sub->add_flag_callback(
      "--no-repack,--nr", [opts] { opts->repack = false; },
      "keep every weight's GGUF layout: no load-time repacking for the CPU kernels (-nr, as llama.cpp)");
}

std::string* add_hub_options(CLI::App* sub, std::string* model) {
  struct Names {
    std::string hf, hff, url, revision, token;
  };
  auto n = std::make_shared<Names>();
  sub->add_option("--hf,--hfr,--hf-repo", n->hf, "model by name: user/repo[:quant] on Hugging Face ($HF_ENDPOINT)")
      ->type_name("REPO");
  sub->add_option("--hff,--hf-file", n->hff, "with -hf: this file of the repository instead of picking by quant")
      ->type_name("FILE");
  sub->add_option("--mu,--model-url", n->url, "model by URL (downloaded once into $OPAL_CACHE)")->type_name("URL");
  sub->add_option("--hf-revision", n->revision, "with -hf: the repository's branch, tag or commit (default main)")
      ->type_name("REV");
  sub->add_option("--hft,--hf-token", n->token, "Hugging Face access token (default: $HF_TOKEN)")->type_name("TOKEN");
  add_pre_action(sub, [n, model, sub] {
    const int given = int(!model->empty()) + int(!n->hf.empty()) + int(!n->url.empty());
    if (given > 1) fail("give one of -m, -hf and -mu");
    if (!n->hff.empty() && n->hf.empty()) fail("-hff names a file of the repository -hf names: give -hf too");
    const CLI::Option* hfd = sub->get_option_no_throw("--hfd");  // --hf-revision applies to -hfd's repository too
    if (!n->revision.empty() && n->hf.empty() && !(hfd && hfd->count() > 0))
      fail("--hf-revision names a revision of the -hf (or -hfd) repository: give -hf or -hfd");
    hub::HubOptions o = hub_options(sub);
    if (!n->revision.empty()) o.revision = n->revision;
    if (!n->hf.empty()) *model = hub::fetch_hf(o, n->hf, n->hff);
    else if (!n->url.empty()) *model = hub::fetch_url(o, n->url);
  });
  return &n->hf;
}

hub::HubOptions hub_options(const CLI::App* sub) {
  hub::HubOptions o = hub::HubOptions::from_env();
  const CLI::Option* t = sub->get_option_no_throw("--hf-token");
  if (t && t->count() > 0) {
    o.token = t->as<std::string>();
    if (o.token.empty()) fail("--hf-token is empty");
  }
  return o;
}

void add_model_options(CLI::App* sub, std::string* model, LoadOptions* load, ModelDefault dflt) {
  if (dflt == ModelDefault::BuiltIn)
    sub->add_option("-m,--model", *model, "GGUF model (default: models/opal-kjv.gguf, or $OPAL_DEFAULT_MODEL)");
  else sub->add_option("-m,--model", *model, "GGUF model (or -hf / -mu)");
  add_hub_options(sub, model);
  if (dflt == ModelDefault::Required)
    add_pre_action(sub, [model] {
      if (model->empty()) fail("a model is needed: -m FILE, -hf user/repo[:quant] or -mu URL");
    });
  add_load_options(sub, load);
}

}  // namespace opal::tools
