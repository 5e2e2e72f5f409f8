// The model `opal run` (and `opal chat`) use when -m is absent: the small
// opal-kjv model the project trains itself (models/opal-kjv.gguf, see training/).
#pragma once
#include <string>

namespace opal::tools {

// Where the default model is, first match wins:
//   1. $OPAL_DEFAULT_MODEL (must exist when set);
//   2. models/opal-kjv.gguf above the binary's folder (build/<preset>/opal -> repo root),
//      or next to an installed binary's ../share/opal/;
//   3. models/opal-kjv.gguf in the source tree the binary was built from.
// Throws opal::Error naming every place it looked when none has the file.
std::string default_model_path();

}  // namespace opal::tools
