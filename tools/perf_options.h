// `--perf-log FILE`, `--trace FILE`, `--summary`, `--shadow` for any
// subcommand that runs a model (run, logits, perplexity, bench). One call adds
// the flags; a PerfSession turns them into the RunHooks to install:
//
//   PerfOptions perf;                       // in the subcommand's options
//   add_perf_options(sub, perf);            // when registering it
//   PerfSession session(perf);              // in the action
//   ctx.set_hooks(session.hooks());         // null when every flag is off
//   ...run...
//   session.finish();                       // writes the trace, prints summary/shadow report
//
// With every flag off, hooks() is null and the executors do no per-node work.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "backends/shadow/shadow_compare.h"
#include "graph/perf/perf_events.h"
#include "graph/perf/perf_sinks.h"

namespace opal::tools {

struct PerfOptions {
  std::string perf_log;  // "-" = stderr
  std::string trace;
  bool summary = false;
  bool shadow = false;
  bool any() const { return !perf_log.empty() || !trace.empty() || summary || shadow; }
};

void add_perf_options(CLI::App* sub, PerfOptions& o);

class PerfSession {
 public:
  explicit PerfSession(const PerfOptions& o);  // opens the files (throws opal::Error)
  ~PerfSession();
  RunHooks* hooks();
  // Writes the trace, prints the summary and the shadow report to stderr.
  // Returns 0, or 3 when --shadow found a divergence (the exit status to use).
  int finish();
  const ShadowCompare* shadow() const { return shadow_.get(); }

 private:
  std::unique_ptr<PerfRecorder> recorder_;
  std::unique_ptr<ShadowCompare> shadow_;
  HookChain chain_;
  bool finished_ = false;
};

}  // namespace opal::tools
