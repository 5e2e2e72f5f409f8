// The shared context flags (tools/context_options.h).
#include "tools/context_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "tools/isa_option.h"

namespace opal::tools {

DType parse_cache_type(const std::string& name, const char* flag) {
  if (name != "f16" && name != "f32" && name != "bf16" && name != "q8_0" && name != "q4_0")
    fail("{} must be f16, bf16, f32, q8_0 or q4_0, got '{}'", flag, name);
  return *dtype_from_name(name);
}

FlashAttn parse_flash_attn(const std::string& value) {
  if (value == "on" || value == "1" || value == "true") return FlashAttn::On;
  if (value == "off" || value == "0" || value == "false") return FlashAttn::Off;
  if (value == "auto" || value == "-1") return FlashAttn::Auto;
  fail("-fa must be on, off or auto, got '{}'", value);
}

ContextParams ContextOptions::params() const {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_ubatch;
  cp.kv_type = parse_cache_type(cache_type_k);
  if (!cache_type_v.empty()) cp.kv_type_v = parse_cache_type(cache_type_v, "-ctv");
  cp.flash_attn = parse_flash_attn(flash_attn);
  cp.swa_full = swa_full;
  return cp;
}

int ContextOptions::thread_count() const {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= cores || threads_force) return threads;
  fmt::print(stderr,
             "warning: -t {} is more than this machine's {} cores: using {} (threads beyond the cores wait on each "
             "other and run far slower; --threads-force keeps {})\n",
             threads, cores, cores, threads);
  return cores;
}

void warn_context_size(int64_t n_ctx, const HParams& hp, const char* command) {
  if (n_ctx <= 0 || hp.n_ctx_train <= 0 || n_ctx <= hp.n_ctx_train) return;
  std::string scaling;
  if (hp.rope_yarn)
    scaling = fmt::format("the model's GGUF sets YaRN rope scaling (factor {:g}, original context {})",
                          hp.rope_freq_scale > 0 ? 1.0 / hp.rope_freq_scale : 0.0, hp.n_ctx_orig_yarn);
  else if (hp.rope_freq_scale != 1.0f)
    scaling = fmt::format("the model's GGUF sets linear rope scaling (factor {:g})", 1.0 / hp.rope_freq_scale);
  else scaling = "the model's GGUF sets no rope scaling (rope.scaling.type), so positions past it were never trained";
  fmt::print(stderr,
             "warning: {}: -c {} is above the model's training context of {} tokens; {}: expect worse output past "
             "{} tokens\n",
             command, n_ctx, hp.n_ctx_train, scaling, hp.n_ctx_train);
}

void warn_slot_context(int64_t n_ctx_total, int n_parallel, int64_t n_ctx_slot, const HParams& hp) {
  if (n_ctx_slot >= kUsefulSlotContext) return;
  const int64_t want = kUsefulSlotContext * n_parallel;
  std::string fix = fmt::format("-c {}", want);
  if (hp.n_ctx_train > 0 && want > hp.n_ctx_train)
    fix += fmt::format(" (above the model's training context of {}) or -np {}", hp.n_ctx_train,
                       std::max<int64_t>(1, hp.n_ctx_train / kUsefulSlotContext));
  fmt::print(
      stderr,
      "warning: serve: -c {} over -np {} slots leaves {} tokens per slot; most chat requests will not fit (400). "
      "Use {} for {} tokens per slot\n",
      n_ctx_total, n_parallel, n_ctx_slot, fix, kUsefulSlotContext);
}

void check_n_predict(int64_t n_predict) {
  if (n_predict < -1)
    fail("-n must be -1 (until end of generation or a full context) or a count >= 0, got {}", n_predict);
}

CLI::Validator at_least(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        size_t used = 0;
        int64_t v = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return fmt::format("must be an integer >= {}, got '{}'", lo, text);
        if (v < lo) return fmt::format("must be >= {}, got {}", lo, v);
        return {};
      },
      fmt::format("INT>={}", lo));
}

void add_context_options(CLI::App* sub, ContextOptions& o, unsigned flags) {
  using namespace context_help;
  if (flags & kCtxSizeFlag)
    sub->add_option("-c,--ctx-size", o.n_ctx,
                    o.n_ctx == 0 ? fmt::format("{} (default 0: the model's)", kCtxSize)
                                 : fmt::format("{} (default {})", kCtxSize, o.n_ctx))
        ->check(at_least(0));
  if (flags & kBatchFlag)
    sub->add_option("-b,--batch-size", o.n_batch, fmt::format("{} (default {})", kBatch, o.n_batch))
        ->check(at_least(1));
  if (flags & kUbatchFlag)
    sub->add_option("--ub,--ubatch-size", o.n_ubatch,
                    fmt::format("{} (default {}; llama.cpp: -ub)", kUbatch, o.n_ubatch))
        ->check(at_least(1));
  if (flags & kCacheTypeFlag)
    sub->add_option("--ctk,--cache-type-k", o.cache_type_k,
                    fmt::format("{} (default {}; llama.cpp: -ctk)", kCacheType, o.cache_type_k));
  if (flags & kCacheTypeFlag) {
    sub->add_option("--ctv,--cache-type-v", o.cache_type_v, fmt::format("{} (llama.cpp: -ctv)", kCacheTypeV));
    sub->add_option("--fa,--flash-attn", o.flash_attn,
                    fmt::format("{} (default {}; llama.cpp: -fa)", kFlashAttn, o.flash_attn));
  }
  if (flags & kCacheTypeFlag)
    sub->add_flag("--swa-full", o.swa_full,
                  "sliding-window layers keep the whole context, not just their window (llama.cpp: --swa-full)");
  if (flags & kThreadsFlag) {
    sub->add_option("-t,--threads", o.threads,
                    o.threads == 0 ? fmt::format("{} (default: all cores)", kThreads)
                                   : fmt::format("{} (default {})", kThreads, o.threads))
        ->check(at_least(0));
    sub->add_flag("--threads-force", o.threads_force, "use -t as given even above the core count (not in llama.cpp)");
  }
}

void add_engine_options(CLI::App* sub, ContextOptions& context, BackendOptions& backend, PerfOptions& perf,
                        unsigned context_flags) {
  add_context_options(sub, context, context_flags);
  add_isa_option(sub);
  add_backend_option(sub, backend);
  add_perf_options(sub, perf);
}

}  // namespace opal::tools
