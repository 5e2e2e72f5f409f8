// The speculative decoding flags of `run`, `chat`, `serve` and `bench`, with
// llama.cpp's names (docs/speculative.md):
//   -md,--model-draft FILE      a draft model (implies --spec-type draft); -hfd user/repo[:quant] fetches one by name
//   --spec-type none|draft|ngram-simple|ngram-map-k|ngram-map-k4v|ngram-mod|ngram-cache
//   --draft-max,--draft-n N     most tokens per draft (16); --spec-draft-n-max as in newer llama.cpp
//   --draft-min N               shorter drafts are not verified (0); --spec-draft-n-min
//   --draft-p-min P             the draft model drafts while its top probability >= P (0.8); --spec-draft-p-min
//   --spec-ngram-size-n N       ngram-simple: length of the key looked up (3)
//   --spec-ngram-size-m M       ngram-simple, ngram-map-*: most tokens drafted after a match (0: --draft-max)
//   --spec-ngram-min-hits H     ngram-map-*: times the m-gram must have followed the key (1)
//   -cd,--ctx-size-draft N      the draft model's context in tokens (0: the target's)
//   -td,--threads-draft N       the draft model's compute threads (0: the target's -t)
//   -tbd,--threads-batch-draft N  the same count as -td (Opal has one thread count for batches and single
//                               tokens): sets it when -td is not given, refused when it differs
//   -devd,--device-draft LIST   the draft model's backends besides the CPU ("none": the CPU alone; default: the
//                               target's --backend)
//   -ctkd,-ctvd TYPE            the draft model's K and V cache types (default: the target's -ctk, -ctv)
//   -hffd,--hf-file-draft FILE  with -hfd: this file of the repository (--hf-revision applies to -hfd too)
//   -lcs,-lcd FILE              ngram-cache's static and dynamic lookup cache files (llama.cpp's format); either
//                               implies --spec-type ngram-cache, with another type they are refused
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
#include "tools/backend_options.h"

namespace opal::tools {

// The draft model's own context and devices (llama.cpp's -cd, -td, -devd).
struct DraftModelOptions {
  int64_t n_ctx = 0;         // -cd: context in tokens (0: the target's)
  int threads = 0;           // -td: compute threads (0: the target's)
  int threads_batch = 0;     // -tbd: must equal -td when both are given (0: as -td)
  std::string devices;       // -devd: backends besides the CPU, "none" for the CPU alone; empty: the target's
  std::string cache_type_k;  // -ctkd: empty: the target's -ctk
  std::string cache_type_v;  // -ctvd: empty: the target's -ctv
  // The draft's compute threads: -td, else -tbd (0: the target's).
  int thread_count() const { return threads > 0 ? threads : threads_batch; }
  // True when the draft needs a registry of its own (other threads or devices than the target's).
  bool own_registry() const { return thread_count() > 0 || !devices.empty(); }
  // The draft context's parameters: the target's `cp` with -cd, -ctkd and -ctvd applied (throws opal::Error
  // naming the flag for an unknown cache type).
  ContextParams context_params(ContextParams cp) const;
  // The --backend list for the draft's registry: `target` unless -devd names another.
  std::string backends(const std::string& target) const {
    return devices.empty() ? target : devices == "none" ? "" : devices;
  }
};

struct SpecOptions {
  std::string model_draft;  // -md (or the -hfd file)
  std::string type;         // --spec-type; empty: draft with -md, else none
  SpecParams params;
  int mod_n_max = -1, mod_n_min = -1;  // --spec-ngram-mod-n-max/-n-min (ngram-mod's --draft-max/-min); -1: unset
  DraftModelOptions draft;             // -cd, -td, -tbd, -devd, -ctkd, -ctvd
  // The SpecParams these flags name: the type resolved, values checked (throws opal::Error naming the flag).
  SpecParams resolved() const;
};

void add_spec_options(CLI::App* sub, SpecOptions& o);

// A draft for one sequence of a target context: the draft model and its
// context when one is used, and the Speculation generate() takes.
struct Draft {
  std::unique_ptr<Registry> registry;  // the draft's own devices (-td, -devd); null: the target's
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Speculation> spec;  // null: no speculation
};

// Loads the draft model (vocabulary checked against the target's; the
// target's context parameters but -cd's size; the target's registry `reg`
// unless -td or -devd ask for other threads or devices, `backend` and
// `threads` being the target's) and makes the drafter for sequence `seq`.
// Prints the draft's context, threads and devices on stderr.
Draft make_draft(const SpecOptions& o, Registry& reg, const BackendOptions& backend, int threads,
                 const LoadOptions& load, const Vocab& target_vocab, const Context& target, int32_t seq = 0);

// The end of a run: the drafter writes what it keeps (ngram-cache's -lcd), said on stderr. Throws opal::Error.
void finish_draft(const Draft& d);

// "draft: 123 drafted, 100 accepted (81.3 %) in 40 verifications" for the summary lines.
std::string spec_summary(const Speculation& spec);

}  // namespace opal::tools
