// The shared context flags (tools/context_options.h).
#include "tools/context_options.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tools/isa_option.h"

namespace opal::tools {

DType parse_cache_type(const std::string& name) {
  if (name != "f16" && name != "f32" && name != "bf16") fail("-ctk must be f16, bf16 or f32, got '{}'", name);
  return *dtype_from_name(name);
}

ContextParams ContextOptions::params() const {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_ubatch;
  cp.kv_type = parse_cache_type(cache_type_k);
  cp.swa_full = swa_full;
  return cp;
}

void add_context_options(CLI::App* sub, ContextOptions& o, unsigned flags) {
  using namespace context_help;
  if (flags & kCtxSizeFlag)
    sub->add_option("-c,--ctx-size", o.n_ctx,
                    o.n_ctx == 0 ? fmt::format("{} (default 0: the model's)", kCtxSize)
                                 : fmt::format("{} (default {})", kCtxSize, o.n_ctx));
  if (flags & kBatchFlag)
    sub->add_option("-b,--batch-size", o.n_batch, fmt::format("{} (default {})", kBatch, o.n_batch));
  if (flags & kUbatchFlag)
    sub->add_option("--ub,--ubatch-size", o.n_ubatch,
                    fmt::format("{} (default {}; llama.cpp: -ub)", kUbatch, o.n_ubatch));
  if (flags & kCacheTypeFlag)
    sub->add_option("--ctk,--cache-type-k", o.cache_type_k,
                    fmt::format("{} (default {}; llama.cpp: -ctk)", kCacheType, o.cache_type_k));
  if (flags & kCacheTypeFlag)
    sub->add_flag("--swa-full", o.swa_full,
                  "sliding-window layers keep the whole context, not just their window (llama.cpp: --swa-full)");
  if (flags & kThreadsFlag)
    sub->add_option("-t,--threads", o.threads,
                    o.threads == 0 ? fmt::format("{} (default: all cores)", kThreads)
                                   : fmt::format("{} (default {})", kThreads, o.threads));
}

void add_engine_options(CLI::App* sub, ContextOptions& context, BackendOptions& backend, PerfOptions& perf,
                        unsigned context_flags) {
  add_context_options(sub, context, context_flags);
  add_isa_option(sub);
  add_backend_option(sub, backend);
  add_perf_options(sub, perf);
}

}  // namespace opal::tools
