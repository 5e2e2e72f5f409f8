// Speculative decoding flags and the CLI's draft model (tools/spec_options.h).
#include "tools/spec_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "backends/cpu/cpu_device.h"
#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "hub/hub.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/load_options.h"

namespace opal::tools {

SpecParams SpecOptions::resolved() const {
  SpecParams p = params;
  if (!type.empty()) p.type = spec_type_from_name(type == "draft-simple" ? "draft" : type);  // newer llama.cpp's name
  else if (!model_draft.empty()) p.type = SpecType::Draft;
  else p.type = p.lookup_static.empty() && p.lookup_dynamic.empty() ? SpecType::None : SpecType::NgramCache;
  if (p.type == SpecType::Draft && model_draft.empty())
    fail("--spec-type draft needs a draft model: -md FILE or -hfd user/repo[:quant]");
  if (p.type != SpecType::Draft && !model_draft.empty())
    fail("-md names a draft model but --spec-type is {}", spec_type_name(p.type));
  if (p.type != SpecType::Draft) {
    const char* flag = draft.n_ctx != 0              ? "-cd"
                       : draft.threads != 0          ? "-td"
                       : draft.threads_batch != 0    ? "-tbd"
                       : !draft.devices.empty()      ? "-devd"
                       : !draft.cache_type_k.empty() ? "-ctkd"
                       : !draft.cache_type_v.empty() ? "-ctvd"
                                                     : nullptr;
    if (flag) fail("{} sets up the draft model, but there is none: give -md FILE or -hfd user/repo[:quant]", flag);
  }
  if (draft.threads > 0 && draft.threads_batch > 0 && draft.threads_batch != draft.threads)
    fail(
        "-tbd {} differs from -td {}: Opal's draft model uses one thread count for batches and single tokens (give "
        "one of them, or the same count)",
        draft.threads_batch, draft.threads);
  if (p.type == SpecType::Draft) draft.context_params(ContextParams{});  // checks -ctkd and -ctvd
  if (!draft.devices.empty() && draft.devices != "none") {
    try {
      parse_backend_list(draft.devices);
    } catch (const Error& e) {
      fail("-devd '{}': {} (or 'none': the CPU alone)", draft.devices, e.what());
    }
  }
  if (mod_n_max != -1 && (mod_n_max < 1 || mod_n_max > 1024))
    fail("--spec-ngram-mod-n-max must be in [1, 1024], got {}", mod_n_max);
  if (mod_n_min != -1 && (mod_n_min < 0 || mod_n_min > 1024))
    fail("--spec-ngram-mod-n-min must be in [0, 1024], got {}", mod_n_min);
  for (const auto& [value, flag] :
       {std::pair{mod_n_max, "--spec-ngram-mod-n-max"}, {mod_n_min, "--spec-ngram-mod-n-min"}})
    if (value != -1 && p.type != SpecType::NgramMod)
      fail("{} applies to --spec-type ngram-mod, not {}", flag, spec_type_name(p.type));
  if (mod_n_max >= 0) p.n_max = mod_n_max;
  if (mod_n_min >= 0) p.n_min = mod_n_min;
  p.validate();
  return p;
}

void add_spec_options(CLI::App* sub, SpecOptions& o) {
  const char* group = "Speculative decoding";
  sub->add_option("--md,--model-draft,--spec-draft-model", o.model_draft, "draft model for speculative decoding (GGUF)")
      ->type_name("FILE")
      ->group(group);
  auto hfd = std::make_shared<std::string>(), hffd = std::make_shared<std::string>();
  sub->add_option("--hfd,--hfrd,--hf-repo-draft,--spec-draft-hf", *hfd,
                  "draft model by name: user/repo[:quant] on Hugging Face (at --hf-revision when given)")
      ->type_name("REPO")
      ->group(group);
  sub->add_option("--hffd,--hf-file-draft", *hffd, "with -hfd: this file of the repository instead of picking by quant")
      ->type_name("FILE")
      ->group(group);
  add_pre_action(sub, [hfd, hffd, &o, sub] {
    if (!hffd->empty() && hfd->empty()) fail("-hffd names a file of the repository -hfd names: give -hfd too");
    if (hfd->empty()) return;
    if (!o.model_draft.empty()) fail("give one of -md and -hfd");
    hub::HubOptions ho = hub_options(sub);
    const CLI::Option* rev = sub->get_option_no_throw("--hf-revision");
    if (rev && rev->count() > 0) ho.revision = rev->as<std::string>();
    o.model_draft = hub::fetch_hf(ho, *hfd, *hffd);
  });
  sub->add_option("--spec-type", o.type,
                  "speculative decoding: none, draft (with -md), or without a draft model ngram-simple (prompt "
                  "lookup), ngram-map-k, ngram-map-k4v, ngram-mod or ngram-cache (with -lcs, -lcd)")
      ->type_name("TYPE")
      ->group(group);
  sub->add_option("--draft-max,--draft-n,--spec-draft-n-max", o.params.n_max, "most tokens per draft")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--draft-min,--spec-draft-n-min", o.params.n_min, "shorter drafts are not verified")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--draft-p-min,--spec-draft-p-min", o.params.p_min,
                  "the draft model drafts while its top token's probability is at least this")
      ->capture_default_str()
      ->group(group);
  sub->add_option(
         "--spec-ngram-size-n,--spec-ngram-simple-size-n,--spec-ngram-map-k-size-n,--spec-ngram-map-k4v-size-n,--spec-"
         "ngram-mod-n-match",
         o.params.ngram_n, "ngram-*: tokens of the key looked up")
      ->capture_default_str()
      ->group(group);
  sub->add_option(
         "--spec-ngram-size-m,--spec-ngram-simple-size-m,--spec-ngram-map-k-size-m,--spec-ngram-map-k4v-size-m",
         o.params.ngram_m, "ngram-simple, ngram-map-*: most tokens drafted after a match (0: --draft-max)")
      ->capture_default_str()
      ->group(group);
  sub->add_option(
         "--spec-ngram-min-hits,--spec-ngram-simple-min-hits,--spec-ngram-map-k-min-hits,--spec-ngram-map-k4v-min-hits",
         o.params.ngram_min_hits,
         "ngram-map-*: times the drafted tokens must have followed the key before; ngram-simple: times the key "
         "must have occurred before")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--cd,--ctx-size-draft,--spec-draft-ctx-size", o.draft.n_ctx,
                  "the draft model's context in tokens (default 0: the target's); drafting stops for a sequence "
                  "longer than it")
      ->check(at_least(0))
      ->group(group);
  sub->add_option("--td,--threads-draft,--spec-draft-threads", o.draft.threads,
                  "the draft model's compute threads (default 0: the target's -t)")
      ->check(at_least(0))
      ->group(group);
  sub->add_option("--spec-ngram-mod-n-max", o.mod_n_max, "ngram-mod: most tokens per draft (sets --draft-max)")
      ->group(group);
  sub->add_option("--spec-ngram-mod-n-min", o.mod_n_min,
                  "ngram-mod: a shorter draft is not verified (sets --draft-min)")
      ->group(group);
  sub->add_option("--tbd,--threads-batch-draft,--spec-draft-threads-batch", o.draft.threads_batch,
                  "the draft model's threads for batches: Opal uses one count for batches and single tokens, so "
                  "this is -td (refused if both are given and differ)")
      ->check(at_least(0))
      ->group(group);
  sub->add_option("--ctkd,--cache-type-k-draft,--spec-draft-type-k", o.draft.cache_type_k,
                  "the draft model's K cache type: f16, bf16, f32, q8_0 or q4_0 (default: the target's -ctk)")
      ->type_name("TYPE")
      ->group(group);
  sub->add_option("--ctvd,--cache-type-v-draft,--spec-draft-type-v", o.draft.cache_type_v,
                  "the draft model's V cache type (default: the target's -ctv; a quantized V needs flash attention)")
      ->type_name("TYPE")
      ->group(group);
  sub->add_option("--lcs,--lookup-cache-static", o.params.lookup_static,
                  "ngram-cache: a static lookup cache (llama-lookup-create's file), read at start; implies "
                  "--spec-type ngram-cache")
      ->type_name("FILE")
      ->group(group);
  sub->add_option("--lcd,--lookup-cache-dynamic", o.params.lookup_dynamic,
                  "ngram-cache: a dynamic lookup cache, read at start if it exists and written back with this run's "
                  "text at its end (opal serve reads it only); implies --spec-type ngram-cache")
      ->type_name("FILE")
      ->group(group);
  sub->add_option("--devd,--device-draft,--spec-draft-device", o.draft.devices,
                  "the draft model's backends besides the CPU, comma-separated, or 'none' for the CPU alone "
                  "(default: the target's --backend)")
      ->type_name("LIST")
      ->group(group);
}

ContextParams DraftModelOptions::context_params(ContextParams cp) const {
  if (n_ctx > 0) cp.n_ctx = n_ctx;
  if (!cache_type_k.empty()) cp.kv_type = parse_cache_type(cache_type_k, "-ctkd");
  if (!cache_type_v.empty()) cp.kv_type_v = parse_cache_type(cache_type_v, "-ctvd");
  return cp;
}

int draft_thread_count(int threads) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= cores) return threads;
  fmt::print(stderr, "warning: -td {} is more than this machine's {} cores: using {}\n", threads, cores, cores);
  return cores;
}

Draft make_draft(const SpecOptions& o, Registry& reg, const BackendOptions& backend, int threads,
                 const LoadOptions& load, const Vocab& target_vocab, const Context& target, int32_t seq) {
  const SpecParams p = o.resolved();
  Draft d;
  if (p.type == SpecType::None) return d;
  check_speculation_supported(target, "target");
  if (p.type == SpecType::Draft) {
    Registry* dreg = &reg;
    if (o.draft.own_registry()) {
      BackendOptions b = backend;
      b.backends = o.draft.backends(backend.backends);
      d.registry = b.make_registry(o.draft.thread_count() > 0 ? draft_thread_count(o.draft.thread_count()) : threads);
      dreg = d.registry.get();
    }
    d.model = Model::load(o.model_draft, *dreg, load);
    check_draft_vocab(target_vocab, Vocab::from_gguf(d.model->gguf()));
    d.ctx = std::make_unique<Context>(*d.model, o.draft.context_params(target.params()));
    std::string devices;
    for (const Device* dev : dreg->devices()) devices += (devices.empty() ? "" : ",") + dev->name();
    const auto* cpu = dynamic_cast<const CpuDevice*>(&dreg->host());
    const ContextParams& dp = d.ctx->params();
    fmt::print(stderr, "opal: draft model: KV cache {:.2f} MiB ({} cells, K {}, V {}), {} threads, devices {}\n",
               double(d.ctx->kv_bytes()) / 1048576.0, d.ctx->n_ctx(), dtype_name(dp.kv_type),
               dtype_name(dp.kv_type_v.value_or(dp.kv_type)), cpu ? cpu->n_threads() : threads, devices);
  }
  d.spec = make_speculation(p, d.ctx.get(), seq, target.n_vocab());
  return d;
}

void finish_draft(const Draft& d) {
  if (!d.spec) return;
  const std::string done = d.spec->drafter().finish();
  if (!done.empty()) fmt::print(stderr, "opal: {}\n", done);
}

std::string spec_summary(const Speculation& spec) {
  const SpecStats& s = spec.stats();
  return fmt::format("{}: {} drafted, {} accepted ({:.1f} %) in {} verifications", spec_type_name(spec.params().type),
                     s.n_drafted, s.n_accepted, 100.0 * s.acceptance(), s.n_verify);
}

}  // namespace opal::tools
