// The speculative decoding flags of `run`, `chat`, `serve` and `bench`, with
// llama.cpp's names (docs/speculative.md):
//   -md,--model-draft FILE      a draft model (implies --spec-type draft); -hfd user/repo[:quant] fetches one by name
//   --spec-type none|draft|ngram-simple
//   --draft-max,--draft-n N     most tokens per draft (16); --spec-draft-n-max as in newer llama.cpp
//   --draft-min N               shorter drafts are not verified (0); --spec-draft-n-min
//   --draft-p-min P             the draft model drafts while its top probability >= P (0.8); --spec-draft-p-min
//   --spec-ngram-size-n N       ngram-simple: length of the key looked up (3)
//   --spec-ngram-size-m M       ngram-simple: most tokens drafted after a match (0: --draft-max)
// and the draft model's loading for the CLI (run, chat, bench): make_draft().
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "graph/registry.h"
#include "models/model.h"
#include "runtime/context.h"
#include "runtime/speculative.h"
#include "tokenizer/vocab.h"

namespace opal::tools {

struct SpecOptions {
  std::string model_draft;  // -md (or the -hfd file)
  std::string type;         // --spec-type; empty: draft with -md, else none
  SpecParams params;
  // The SpecParams these flags name: the type resolved, values checked (throws opal::Error naming the flag).
  SpecParams resolved() const;
};

void add_spec_options(CLI::App* sub, SpecOptions& o);

// A draft for one sequence of a target context: the draft model and its
// context when one is used, and the Speculation generate() takes.
struct Draft {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Speculation> spec;  // null: no speculation
};

// Loads the draft model (vocabulary checked against the target's; the
// target's context parameters) and makes the drafter for sequence `seq`.
Draft make_draft(const SpecOptions& o, Registry& reg, const LoadOptions& load, const Vocab& target_vocab,
                 const Context& target, int32_t seq = 0);

// "draft: 123 drafted, 100 accepted (81.3 %) in 40 verifications" for the summary lines.
std::string spec_summary(const Speculation& spec);

}  // namespace opal::tools
