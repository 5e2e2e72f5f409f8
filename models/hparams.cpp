#include "models/hparams.h"

#include "core/error.h"

namespace opal {

RopeParams HParams::rope_params() const {
  RopeParams r;
  r.n_rot = int(n_rot);
  r.mode = rope_mode;
  r.freq_base = rope_freq_base;
  r.freq_scale = rope_freq_scale;
  if (rope_yarn) {
    r.ext_factor = yarn_ext_factor;
    r.attn_factor = yarn_attn_factor;
    yarn_corr_dims(r.n_rot, n_ctx_orig_yarn, rope_freq_base, yarn_beta_fast, yarn_beta_slow, &r.corr_low, &r.corr_high);
  }
  return r;
}

HParams HParams::from_gguf(const gguf::File& f, const std::string& arch, RopeMode rope_mode) {
  HParams h;
  h.arch = arch;
  const std::string p = arch + ".";
  auto req = [&](const char* k) { return f.require_int(p + k); };
  auto opt = [&](const char* k, int64_t def) { return f.get_int(p + k, def); };
  h.n_ctx_train = opt("context_length", 2048);
  h.n_embd = req("embedding_length");
  h.n_layer = req("block_count");
  h.n_head = req("attention.head_count");
  h.n_head_kv = opt("attention.head_count_kv", h.n_head);
  h.n_ff = opt("feed_forward_length", 0);
  h.n_vocab = opt("vocab_size", 0);
  if (h.n_embd <= 0 || h.n_layer <= 0 || h.n_head <= 0 || h.n_head_kv <= 0)
    fail("{}: {}embedding_length, block_count and head counts must be positive", f.path(), p);
  const int64_t kLimit = int64_t(1) << 20;
  if (h.n_embd > kLimit || h.n_layer > 4096 || h.n_head > 4096 || h.n_ff < 0 || h.n_ff > kLimit)
    fail("{}: implausible hyperparameters (n_embd {}, n_layer {}, n_head {}, n_ff {})", f.path(), h.n_embd, h.n_layer,
         h.n_head, h.n_ff);
  if (h.n_head % h.n_head_kv != 0)
    fail("{}: {}attention.head_count ({}) is not a multiple of head_count_kv ({})", f.path(), p, h.n_head, h.n_head_kv);
  if (h.n_embd % h.n_head != 0 && !f.has(p + "attention.key_length"))
    fail("{}: n_embd {} is not a multiple of n_head {} and attention.key_length is absent", f.path(), h.n_embd,
         h.n_head);
  h.head_dim_k = opt("attention.key_length", h.n_embd / h.n_head);
  h.head_dim_v = opt("attention.value_length", h.head_dim_k);
  h.n_rot = opt("rope.dimension_count", h.head_dim_k);
  if (h.head_dim_k <= 0 || h.head_dim_v <= 0 || h.head_dim_k > 4096 || h.head_dim_v > 4096)
    fail("{}: implausible head size (key {}, value {})", f.path(), h.head_dim_k, h.head_dim_v);
  if (h.n_rot <= 0 || h.n_rot > h.head_dim_k || h.n_rot % 2 != 0)
    fail("{}: {}rope.dimension_count {} must be even and at most the head size {}", f.path(), p, h.n_rot, h.head_dim_k);
  h.rope_freq_base = float(f.get_float(p + "rope.freq_base", 10000.0));
  const std::string scaling = f.get_string(p + "rope.scaling.type", "");
  double factor = f.get_float(p + "rope.scaling.factor", 0.0);
  if (factor == 0.0) factor = f.get_float(p + "rope.scale_linear", 0.0);
  if (scaling == "linear" || (scaling.empty() && factor > 0.0)) {
    if (factor > 0.0) h.rope_freq_scale = float(1.0 / factor);
  } else if (scaling == "yarn") {
    if (factor > 0.0) h.rope_freq_scale = float(1.0 / factor);
    h.rope_yarn = true;
    h.n_ctx_orig_yarn = f.get_int(p + "rope.scaling.original_context_length", h.n_ctx_train);
    h.yarn_ext_factor = float(f.get_float(p + "rope.scaling.yarn_ext_factor", 1.0));
    h.yarn_attn_factor = float(f.get_float(p + "rope.scaling.attn_factor", 1.0));
    h.yarn_beta_fast = float(f.get_float(p + "rope.scaling.yarn_beta_fast", 32.0));
    h.yarn_beta_slow = float(f.get_float(p + "rope.scaling.yarn_beta_slow", 1.0));
    if (h.n_ctx_orig_yarn <= 0 || h.yarn_beta_fast <= 0 || h.yarn_beta_slow <= 0 || h.yarn_attn_factor <= 0)
      fail("{}: {}rope.scaling: YaRN needs positive original_context_length, beta_fast, beta_slow and attn_factor",
           f.path(), p);
  } else if (!scaling.empty() && scaling != "none") {
    fail("{}: rope scaling type '{}' is not supported (supported: none, linear, yarn)", f.path(), scaling);
  }
  h.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  h.rope_mode = rope_mode;
  h.n_expert = opt("expert_count", 0);
  h.n_expert_used = opt("expert_used_count", 0);
  h.n_ff_exp = opt("expert_feed_forward_length", 0);
  if (h.n_expert < 0 || h.n_expert > 1024 || h.n_expert_used < 0 || h.n_expert_used > h.n_expert)
    fail("{}: expert_used_count {} must be between 0 and expert_count {} (at most 1024)", f.path(), h.n_expert_used,
         h.n_expert);
  return h;
}

}  // namespace opal
