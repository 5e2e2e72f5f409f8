#include "tools/perf_options.h"

#include <cstdio>

namespace opal::tools {

void add_perf_options(CLI::App* sub, PerfOptions& o) {
  sub->add_option("--perf-log", o.perf_log,
                  "write one OPAL_PERF line per executed kernel and copy to FILE ('-' = stderr)");
  sub->add_option("--trace", o.trace, "write a Chrome/Perfetto trace (JSON) of every kernel and copy to FILE");
  sub->add_flag("--summary", o.summary, "print time, FLOP/s and GB/s per op type and per backend at the end");
  sub->add_flag("--shadow", o.shadow,
                "re-run every node placed on a non-CPU backend on the CPU reference and report the first divergence");
}

PerfSession::PerfSession(const PerfOptions& o) {
  if (!o.perf_log.empty() || !o.trace.empty() || o.summary) {
    recorder_ = std::make_unique<PerfRecorder>();
    if (!o.perf_log.empty()) recorder_->add_sink(std::make_unique<PerfLogSink>(o.perf_log));
    if (!o.trace.empty()) recorder_->add_sink(std::make_unique<TraceSink>(o.trace));
    if (o.summary) recorder_->add_sink(std::make_unique<SummarySink>(stderr));
    chain_.add(recorder_.get());  // first: its timings exclude the shadow's work
  }
  if (o.shadow) {
    shadow_ = std::make_unique<ShadowCompare>(1);
    chain_.add(shadow_.get());
  }
}

PerfSession::~PerfSession() = default;

RunHooks* PerfSession::hooks() {
  if (chain_.empty()) return nullptr;
  if (RunHooks* one = chain_.only()) return one;
  return &chain_;
}

int PerfSession::finish() {
  if (finished_) return 0;
  finished_ = true;
  if (recorder_) recorder_->finish();
  if (shadow_) {
    std::fprintf(stderr, "%s\n", shadow_->report().c_str());
    if (shadow_->diverged()) return 3;
  }
  return 0;
}

}  // namespace opal::tools
