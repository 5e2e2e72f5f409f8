#include "tools/load_options.h"

#include "core/mapped_file.h"

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
}

void add_model_options(CLI::App* sub, std::string* model, LoadOptions* load, ModelDefault dflt) {
  if (dflt == ModelDefault::BuiltIn)
    sub->add_option("-m,--model", *model, "GGUF model (default: models/opal-kjv.gguf, or $OPAL_DEFAULT_MODEL)");
  else sub->add_option("-m,--model", *model, "GGUF model")->required();
  add_load_options(sub, load);
}

}  // namespace opal::tools
