// Speculative decoding flags and the CLI's draft model (tools/spec_options.h).
#include "tools/spec_options.h"

#include <fmt/format.h>

#include "core/error.h"
#include "hub/hub.h"
#include "tools/commands.h"

namespace opal::tools {

SpecParams SpecOptions::resolved() const {
  SpecParams p = params;
  if (!type.empty()) p.type = spec_type_from_name(type);
  else p.type = model_draft.empty() ? SpecType::None : SpecType::Draft;
  if (p.type == SpecType::Draft && model_draft.empty())
    fail("--spec-type draft needs a draft model: -md FILE or -hfd user/repo[:quant]");
  if (p.type != SpecType::Draft && !model_draft.empty())
    fail("-md names a draft model but --spec-type is {}", spec_type_name(p.type));
  p.validate();
  return p;
}

void add_spec_options(CLI::App* sub, SpecOptions& o) {
  const char* group = "Speculative decoding";
  sub->add_option("--md,--model-draft", o.model_draft, "draft model for speculative decoding (GGUF)")
      ->type_name("FILE")
      ->group(group);
  auto hfd = std::make_shared<std::string>();
  sub->add_option("--hfd,--hf-repo-draft", *hfd, "draft model by name: user/repo[:quant] on Hugging Face")
      ->type_name("REPO")
      ->group(group);
  add_pre_action(sub, [hfd, &o] {
    if (hfd->empty()) return;
    if (!o.model_draft.empty()) fail("give one of -md and -hfd");
    o.model_draft = hub::fetch_hf(hub::HubOptions::from_env(), *hfd, "");
  });
  sub->add_option("--spec-type", o.type, "speculative decoding: none, draft (with -md) or ngram-simple (prompt lookup)")
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
  sub->add_option("--spec-ngram-size-n", o.params.ngram_n, "ngram-simple: tokens of the key looked up")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--spec-ngram-size-m", o.params.ngram_m,
                  "ngram-simple: most tokens drafted after a match (0: --draft-max)")
      ->capture_default_str()
      ->group(group);
}

Draft make_draft(const SpecOptions& o, Registry& reg, const LoadOptions& load, const Vocab& target_vocab,
                 const Context& target, int32_t seq) {
  const SpecParams p = o.resolved();
  Draft d;
  if (p.type == SpecType::None) return d;
  check_speculation_supported(target, "target");
  if (p.type == SpecType::Draft) {
    d.model = Model::load(o.model_draft, reg, load);
    check_draft_vocab(target_vocab, Vocab::from_gguf(d.model->gguf()));
    ContextParams cp = target.params();
    cp.kv_type = target.params().kv_type;
    d.ctx = std::make_unique<Context>(*d.model, cp);
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
