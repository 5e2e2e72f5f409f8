// The sampling flags of every subcommand that samples (`opal run`, `opal chat`),
// with llama.cpp's names, defaults and one help text: --temp, --top-k, --top-p,
// --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
// --frequency-penalty, -s/--seed (-1: random); structured output with
// --grammar GBNF, --grammar-file FILE, -j/--json-schema SCHEMA (llama.cpp's names).
//
//   SamplingOptions sampling;                    // in the subcommand's options
//   add_sampling_options(sub, sampling);         // when registering it
//   Sampler s(sampling.params(vocab), n_vocab);  // in the action (grammar compiled against vocab)
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "sampling/sampler.h"
#include "tokenizer/vocab.h"

namespace opal::tools {

struct SamplingOptions {
  SamplerParams sampler;     // llama.cpp's defaults
  int64_t seed = -1;         // -1: random (kRandomSeed)
  std::string grammar;       // GBNF text
  std::string grammar_file;  // GBNF file
  std::string json_schema;   // JSON Schema text
  // The sampler parameters with the seed resolved.
  SamplerParams params() const;
  // The same plus the grammar, if one was given. Throws opal::Error naming the
  // flag when the grammar or schema does not compile, or two were given.
  SamplerParams params(const Vocab& vocab) const;
};

void add_sampling_options(CLI::App* sub, SamplingOptions& o);

}  // namespace opal::tools
