// Gemma 4 (general.architecture = gemma4, the E2B/E4B layout): its own
// declarations and graph (models/gemma4.cpp), because per-layer embeddings,
// KV sharing and per-layer head sizes do not fit the shared decoder.
// docs/models/gemma.md lists each mechanism and where llama.cpp has it.
#pragma once
#include "models/architecture.h"

namespace opal {

void declare_gemma4(const Architecture& arch, TensorTable& table, const HParams& hp);
Tensor* build_gemma4(BuildContext& c);

}  // namespace opal
