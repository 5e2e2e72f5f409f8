// Llama family (Llama 2, Llama 3.x with `rope_freqs` frequency factors,
// TinyLlama, SmolLM2, Mistral, stories*): pre-norm decoder, GQA attention
// with "normal" (interleaved-pair) RoPE — the converter permutes Q/K rows for
// it — and a SwiGLU FFN. Optional untied `output.weight`.
#include "models/builders.h"
#include "models/tensor_table.h"

namespace opal {
namespace {

void declare(TensorTable& t, const HParams& hp) {
  declare_common(t, hp);
  t.optional("rope_freqs.weight", {hp.n_rot / 2});
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    declare_attention(t, hp, il, /*biases=*/false, /*qk_norm=*/false);
    // Some converters emit biases for llama-arch models; take them when present.
    t.optional(TensorTable::layer(il, "attn_q", "bias"), {hp.n_head * hp.head_dim_k});
    t.optional(TensorTable::layer(il, "attn_k", "bias"), {hp.n_embd_k_gqa()});
    t.optional(TensorTable::layer(il, "attn_v", "bias"), {hp.n_embd_v_gqa()});
    declare_ffn(t, hp, il);
  }
}

Tensor* ffn(BuildContext& c, int64_t il, Tensor* x) { return build_ffn(c, x, ffn_weights(c.model, il)); }

Tensor* build(BuildContext& c) { return build_decoder(c, {attention_weights, ffn}); }

}  // namespace

extern const Architecture kArchLlama{"llama", RopeMode::Normal, declare, build};

}  // namespace opal
