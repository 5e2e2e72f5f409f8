// Model hyperparameters as data, read from `<arch>.*` GGUF keys with the
// defaults llama.cpp uses when a key is absent (rope base 10000, head_dim =
// n_embd / n_head, n_head_kv = n_head, n_rot = head_dim, ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "graph/graph.h"
#include "graph/rope.h"

namespace opal {

struct HParams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // attention.key_length
  int64_t head_dim_v = 0;  // attention.value_length
  int64_t n_ff = 0;
  int64_t n_rot = 0;  // rope.dimension_count
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor (linear and YaRN scaling)
  // YaRN (rope.scaling.type = yarn): see graph/rope.h.
  bool rope_yarn = false;
  int64_t n_ctx_orig_yarn = 0;    // rope.scaling.original_context_length (default: context_length)
  float yarn_ext_factor = 0.0f;   // 1 with YaRN unless rope.scaling.yarn_ext_factor says otherwise
  float yarn_attn_factor = 1.0f;  // rope.scaling.attn_factor
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  float rms_eps = 1e-5f;
  RopeMode rope_mode = RopeMode::Normal;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool expert_weights_norm = true;
  // Recurrent models (RWKV-7, models/rwkv7.cpp): a per-sequence state instead of a KV cache.
  bool recurrent = false;
  int64_t wkv_head_size = 0;                                             // wkv.head_size
  int64_t lora_decay = 0, lora_iclr = 0, lora_value = 0, lora_gate = 0;  // attention.*_lora_rank
  float norm_eps = 1e-5f;                                                // attention.layer_norm_epsilon (LayerNorm)
  int64_t n_wkv_head() const { return wkv_head_size > 0 ? n_embd / wkv_head_size : 0; }
  // f32 values of one sequence's state per layer: token-shift (2 * n_embd) and WKV (n_embd * head size).
  int64_t n_state_shift() const { return n_embd; }
  int64_t n_state_wkv() const { return n_embd * wkv_head_size; }
  // Sliding-window attention (Gemma 3/4): attention.sliding_window (0 = none) and which layers use it
  // (attention.sliding_window_pattern: a period P, layer il sliding iff il % P < P - 1, or a bool per layer).
  int64_t n_swa = 0;
  std::vector<uint8_t> swa_layers;      // per layer, 1 = sliding window; empty = no sliding layers
  float rope_freq_base_swa = 10000.0f;  // rope.freq_base_swa (default: rope.freq_base)
  float rope_freq_scale_swa = 1.0f;     // sliding layers' scale (default: the global one)
  float final_logit_softcap = 0.0f;     // final_logit_softcapping: logits = c tanh(logits / c); 0 = none
  // Gemma 4: sliding layers' own head and RoPE sizes (attention.key_length_swa, value_length_swa,
  // rope.dimension_count_swa; default: the global ones), the FFN size per layer (feed_forward_length as an
  // array; empty: n_ff everywhere), the last shared_kv_layers layers reusing earlier layers' K/V, and the
  // per-layer input embedding size (embedding_length_per_layer_input).
  int64_t head_dim_k_swa = 0, head_dim_v_swa = 0, n_rot_swa = 0;
  std::vector<int64_t> n_ff_layers;
  int64_t n_shared_kv_layers = 0;
  int64_t n_embd_per_layer = 0;

  // The ROPE settings of this model (graph/rope.h).
  RopeParams rope_params() const;
  bool is_swa(int64_t il) const { return il >= 0 && size_t(il) < swa_layers.size() && swa_layers[size_t(il)]; }

  int64_t n_embd_k_gqa() const { return head_dim_k * n_head_kv; }
  int64_t n_embd_v_gqa() const { return head_dim_v * n_head_kv; }
  // Per layer (sliding layers may differ: Gemma 4).
  int64_t head_dim_k_at(int64_t il) const { return is_swa(il) ? head_dim_k_swa : head_dim_k; }
  int64_t head_dim_v_at(int64_t il) const { return is_swa(il) ? head_dim_v_swa : head_dim_v; }
  int64_t n_rot_at(int64_t il) const { return is_swa(il) ? n_rot_swa : n_rot; }
  int64_t n_embd_k_gqa(int64_t il) const { return head_dim_k_at(il) * n_head_kv; }
  int64_t n_embd_v_gqa(int64_t il) const { return head_dim_v_at(il) * n_head_kv; }
  int64_t n_ff_at(int64_t il) const { return n_ff_layers.empty() ? n_ff : n_ff_layers[size_t(il)]; }
  // Whether layer il writes its own K/V (Gemma 4: the last n_shared_kv_layers layers read earlier ones').
  bool has_kv(int64_t il) const { return il < n_layer - n_shared_kv_layers; }

  // Reads and validates (positive sizes, n_head divisible by n_head_kv, ...).
  // n_vocab comes from the token embedding when vocab_size is absent (set by the loader).
  // defaults: what llama.cpp assumes for this architecture when a key is absent.
  struct Defaults {
    int64_t swa_period = 0;            // sliding_window_pattern absent (Gemma 3: 6)
    float final_logit_softcap = 0.0f;  // final_logit_softcapping absent (Gemma 4: 30)
  };
  static HParams from_gguf(const gguf::File& f, const std::string& arch, RopeMode rope_mode);
  static HParams from_gguf(const gguf::File& f, const std::string& arch, RopeMode rope_mode, const Defaults& defaults);
};

}  // namespace opal
