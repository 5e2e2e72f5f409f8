// The context flags of every subcommand that runs a model, with one spelling
// and one help text: `-c,--ctx-size`, `-b,--batch-size`, `--ub,--ubatch-size`
// (llama.cpp's -ub), `--ctk,--cache-type-k` and `--ctv,--cache-type-v`
// (llama.cpp's -ctk / -ctv), `--fa,--flash-attn on|off|auto` (llama.cpp's -fa)
// and `-t,--threads`. A subcommand sets its defaults in ContextOptions before
// registering (they appear in the help) and may leave out flags it does not
// take (`opal logits` sizes its context from --tokens):
//
//   ContextOptions ctx;                          // in the subcommand's options
//   add_context_options(sub, ctx);               // when registering it (or
//                                                // add_engine_options: + --isa, --backend, perf)
//   Context c(*model, ctx.params());             // in the action
//
// `opal bench` takes comma lists of the same flags and uses the help texts
// below with its own list parsing.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "models/hparams.h"
#include "runtime/context.h"
#include "tools/backend_options.h"
#include "tools/perf_options.h"

namespace opal::tools {

struct ContextOptions {
  int64_t n_ctx = 0;  // 0: the model's training context
  int64_t n_batch = 2048;
  int64_t n_ubatch = 512;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "";    // empty: as cache_type_k
  std::string flash_attn = "auto";  // on, off or auto (runtime/context.h FlashAttn)
  bool swa_full = false;            // sliding-window layers keep n_ctx cells (llama.cpp --swa-full)
  int threads = 0;                  // 0: all cores
  bool threads_force = false;       // --threads-force: keep -t above the core count
  // The ContextParams these options name; throws opal::Error for an unknown
  // cache type. Threads are not set: the registry gets them (make_registry).
  ContextParams params() const;
  // The thread count to use: -t, capped at the machine's cores with a warning
  // on stderr unless --threads-force (oversubscribed workers spin and wait on
  // each other: `-t 256` on 2 cores ran 4,500x slower).
  int thread_count() const;
};

// Guard rails, as warnings on stderr (the run goes on):
// -c above the model's training context (naming the GGUF's rope scaling, YaRN
// or linear, when it has one). n_ctx 0 (the model's) never warns.
void warn_context_size(int64_t n_ctx, const HParams& hp, const char* command);
// `opal serve`: a slot context below kUsefulSlotContext tokens holds almost no chat.
inline constexpr int64_t kUsefulSlotContext = 256;
void warn_slot_context(int64_t n_ctx_total, int n_parallel, int64_t n_ctx_slot, const HParams& hp);
// -n: -1 (until end of generation) or >= 0; throws opal::Error naming the flag.
void check_n_predict(int64_t n_predict);

// Which flags a subcommand takes.
enum ContextFlag : unsigned {
  kCtxSizeFlag = 1,
  kBatchFlag = 2,
  kUbatchFlag = 4,
  kCacheTypeFlag = 8,
  kThreadsFlag = 16,
  kAllContextFlags = 31,
};

// Adds the flags to a subcommand; the help shows o's current values as defaults.
void add_context_options(CLI::App* sub, ContextOptions& o, unsigned flags = kAllContextFlags);

// Every flag of a subcommand that runs a model, besides its own and the load
// flags: the context flags above, --isa, --backend and the perf flags.
void add_engine_options(CLI::App* sub, ContextOptions& context, BackendOptions& backend, PerfOptions& perf,
                        unsigned context_flags = kAllContextFlags);

// The help texts (without the default), shared with `opal bench`'s list flags.
namespace context_help {
inline constexpr const char* kCtxSize = "context size in tokens";
inline constexpr const char* kBatch = "logical batch size: most tokens one decode call takes";
inline constexpr const char* kUbatch = "physical batch size: most tokens one graph run takes";
inline constexpr const char* kCacheType = "K cache type: f16, bf16, f32, q8_0 or q4_0";
inline constexpr const char* kCacheTypeV =
    "V cache type: f16, bf16, f32, q8_0 or q4_0 (default: as --ctk; a quantized V needs flash attention)";
inline constexpr const char* kFlashAttn =
    "flash attention: on (tiled attention with an online softmax), off (llama.cpp's non-flash arithmetic, bit for "
    "bit), auto (on for a quantized cache, else off)";
inline constexpr const char* kThreads = "compute threads (capped at the core count unless --threads-force)";
}  // namespace context_help

// A CLI11 check: an integer >= lo ("--np: must be >= 1, got 0").
CLI::Validator at_least(int64_t lo);

// Checks a cache type: f16, bf16, f32, q8_0 or q4_0 (throws opal::Error naming the flag, -ctk by default).
DType parse_cache_type(const std::string& name, const char* flag = "-ctk");
// Checks a -fa value: on, off or auto (also 1/0 and true/false, as llama-bench's -fa 0|1).
FlashAttn parse_flash_attn(const std::string& value);

}  // namespace opal::tools
