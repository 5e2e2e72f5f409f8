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
  else p.type = model_draft.empty() ? SpecType::None : SpecType::Draft;
  if (p.type == SpecType::Draft && model_draft.empty())
    fail("--spec-type draft needs a draft model: -md FILE or -hfd user/repo[:quant]");
  if (p.type != SpecType::Draft && !model_draft.empty())
    fail("-md names a draft model but --spec-type is {}", spec_type_name(p.type));
  if (p.type != SpecType::Draft) {
    const char* flag = draft.n_ctx != 0         ? "-cd"
                       : draft.threads != 0     ? "-td"
                       : !draft.devices.empty() ? "-devd"
                                                : nullptr;
    if (flag) fail("{} sets up the draft model, but there is none: give -md FILE or -hfd user/repo[:quant]", flag);
  }
  if (!draft.devices.empty() && draft.devices != "none") {
    try {
      parse_backend_list(draft.devices);
    } catch (const Error& e) {
      fail("-devd '{}': {} (or 'none': the CPU alone)", draft.devices, e.what());
    }
  }
  p.validate();
  return p;
}

void add_spec_options(CLI::App* sub, SpecOptions& o) {
  const char* group = "Speculative decoding";
  sub->add_option("--md,--model-draft,--spec-draft-model", o.model_draft, "draft model for speculative decoding (GGUF)")
      ->type_name("FILE")
      ->group(group);
  auto hfd = std::make_shared<std::string>();
  sub->add_option("--hfd,--hfrd,--hf-repo-draft,--spec-draft-hf", *hfd,
                  "draft model by name: user/repo[:quant] on Hugging Face")
      ->type_name("REPO")
      ->group(group);
  add_pre_action(sub, [hfd, &o, sub] {
    if (hfd->empty()) return;
    if (!o.model_draft.empty()) fail("give one of -md and -hfd");
    o.model_draft = hub::fetch_hf(hub_options(sub), *hfd, "");
  });
  sub->add_option("--spec-type", o.type,
                  "speculative decoding: none, draft (with -md), or without a draft model ngram-simple (prompt "
                  "lookup), ngram-map-k, ngram-map-k4v or ngram-mod")
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
  sub->add_option("--spec-ngram-min-hits,--spec-ngram-map-k-min-hits,--spec-ngram-map-k4v-min-hits",
                  o.params.ngram_min_hits, "ngram-map-*: times the drafted tokens must have followed the key before")
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
  sub->add_option("--devd,--device-draft,--spec-draft-device", o.draft.devices,
                  "the draft model's backends besides the CPU, comma-separated, or 'none' for the CPU alone "
                  "(default: the target's --backend)")
      ->type_name("LIST")
      ->group(group);
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
      d.registry = b.make_registry(o.draft.threads > 0 ? draft_thread_count(o.draft.threads) : threads);
      dreg = d.registry.get();
    }
    d.model = Model::load(o.model_draft, *dreg, load);
    check_draft_vocab(target_vocab, Vocab::from_gguf(d.model->gguf()));
    ContextParams cp = target.params();
    if (o.draft.n_ctx > 0) cp.n_ctx = o.draft.n_ctx;
    d.ctx = std::make_unique<Context>(*d.model, cp);
    std::string devices;
    for (const Device* dev : dreg->devices()) devices += (devices.empty() ? "" : ",") + dev->name();
    const auto* cpu = dynamic_cast<const CpuDevice*>(&dreg->host());
    fmt::print(stderr, "opal: draft model: KV cache {:.2f} MiB ({} cells), {} threads, devices {}\n",
               double(d.ctx->kv_bytes()) / 1048576.0, d.ctx->n_ctx(), cpu ? cpu->n_threads() : threads, devices);
  }
  d.spec = make_speculation(p, d.ctx.get(), seq, target.n_vocab());
  return d;
}

std::string spec_summary(const Speculation& spec) {
  const SpecStats& s = spec.stats();
  return fmt::format("{}: {} drafted, {} accepted ({:.1f} %) in {} verifications", spec_type_name(spec.params().type),
                     s.n_drafted, s.n_accepted, 100.0 * s.acceptance(), s.n_verify);
}

}  // namespace opal::tools
