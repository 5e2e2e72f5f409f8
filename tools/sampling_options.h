// The sampling flags of every subcommand that samples (`opal run`, `opal chat`),
// with llama.cpp's names, defaults and one help text: --temp, --top-k, --top-p,
// --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
// --frequency-penalty, -s/--seed (-1: random).
//
//   SamplingOptions sampling;                    // in the subcommand's options
//   add_sampling_options(sub, sampling);         // when registering it
//   Sampler s(sampling.params(), n_vocab);       // in the action
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>

#include "sampling/sampler.h"

namespace opal::tools {

struct SamplingOptions {
  SamplerParams sampler;  // llama.cpp's defaults
  int64_t seed = -1;      // -1: random (kRandomSeed)
  // The sampler parameters with the seed resolved.
  SamplerParams params() const;
};

void add_sampling_options(CLI::App* sub, SamplingOptions& o);

}  // namespace opal::tools
