#include "models/hparams.h"

#include <algorithm>

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
  return from_gguf(f, arch, rope_mode, Defaults{});
}

namespace {

// attention.sliding_window and its pattern, as llama.cpp reads them: no
// window (or 0) means no sliding layers; the pattern is a period P (layer il
// slides iff il % P < P - 1; absent: the architecture's default) or one bool
// per layer (true = sliding).
void read_sliding_window(const gguf::File& f, const std::string& p, int64_t default_period, HParams& h) {
  h.n_swa = f.get_int(p + "attention.sliding_window", 0);
  if (h.n_swa < 0 || h.n_swa > (int64_t(1) << 24))
    fail("{}: {}attention.sliding_window {} is out of range", f.path(), p, h.n_swa);
  h.final_logit_softcap = float(f.get_float(p + "final_logit_softcapping", h.final_logit_softcap));
  if (!(h.final_logit_softcap >= 0.0f)) fail("{}: {}final_logit_softcapping must not be negative", f.path(), p);
  if (h.n_swa == 0) return;
  h.swa_layers.assign(size_t(h.n_layer), 0);
  const std::string key = p + "attention.sliding_window_pattern";
  const gguf::Value* v = f.find(key);
  if (v && v->type == gguf::ValueType::ARRAY) {
    if (int64_t(v->array.size()) != h.n_layer)
      fail("{}: {} has {} values, expected one per layer ({})", f.path(), key, v->array.size(), h.n_layer);
    for (size_t i = 0; i < v->array.size(); ++i) h.swa_layers[i] = v->array[i].as_bool(key) ? 1 : 0;
    return;
  }
  const int64_t period = v ? v->as_int(key) : default_period;
  if (period < 0 || period > h.n_layer + 1) fail("{}: {} {} is out of range", f.path(), key, period);
  // llama.cpp's set_swa_pattern: period 0 makes every layer sliding.
  for (int64_t il = 0; il < h.n_layer; ++il) h.swa_layers[size_t(il)] = period == 0 || il % period < period - 1;
}

}  // namespace

HParams HParams::from_gguf(const gguf::File& f, const std::string& arch, RopeMode rope_mode, const Defaults& defaults) {
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
  if (const gguf::Value* ff = f.find(p + "feed_forward_length"); ff && ff->type == gguf::ValueType::ARRAY) {
    if (int64_t(ff->array.size()) != h.n_layer)
      fail("{}: {}feed_forward_length has {} values, expected one per layer ({})", f.path(), p, ff->array.size(),
           h.n_layer);
    for (const gguf::Value& x : ff->array) {
      h.n_ff_layers.push_back(x.as_int(p + "feed_forward_length"));
      if (h.n_ff_layers.back() <= 0 || h.n_ff_layers.back() > (int64_t(1) << 20))
        fail("{}: {}feed_forward_length {} is out of range", f.path(), p, h.n_ff_layers.back());
      h.n_ff = std::max(h.n_ff, h.n_ff_layers.back());
    }
  } else {
    h.n_ff = opt("feed_forward_length", 0);
  }
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
  h.head_dim_k_swa = opt("attention.key_length_swa", h.head_dim_k);
  h.head_dim_v_swa = opt("attention.value_length_swa", h.head_dim_v);
  h.n_rot_swa = opt("rope.dimension_count_swa", std::min(h.n_rot, h.head_dim_k_swa));
  if (h.head_dim_k_swa <= 0 || h.head_dim_v_swa <= 0 || h.head_dim_k_swa > 4096 || h.head_dim_v_swa > 4096 ||
      h.n_rot_swa <= 0 || h.n_rot_swa > h.head_dim_k_swa || h.n_rot_swa % 2 != 0)
    fail("{}: implausible sliding-window head sizes (key {}, value {}, rope {})", f.path(), h.head_dim_k_swa,
         h.head_dim_v_swa, h.n_rot_swa);
  h.n_shared_kv_layers = opt("attention.shared_kv_layers", 0);
  if (h.n_shared_kv_layers < 0 || h.n_shared_kv_layers >= h.n_layer)
    fail("{}: {}attention.shared_kv_layers {} must be below block_count {}", f.path(), p, h.n_shared_kv_layers,
         h.n_layer);
  h.n_embd_per_layer = opt("embedding_length_per_layer_input", 0);
  if (h.n_embd_per_layer < 0 || h.n_embd_per_layer > kLimit)
    fail("{}: {}embedding_length_per_layer_input {} is out of range", f.path(), p, h.n_embd_per_layer);
  h.rope_freq_base_swa = float(f.get_float(p + "rope.freq_base_swa", h.rope_freq_base));
  h.rope_freq_scale_swa = h.rope_freq_scale;
  h.final_logit_softcap = defaults.final_logit_softcap;
  read_sliding_window(f, p, defaults.swa_period, h);
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
