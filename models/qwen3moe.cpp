// Qwen3-MoE: Qwen3 attention (QK-norm, NeoX RoPE) with a mixture-of-experts
// FFN: softmax router over expert_count experts, top expert_used_count,
// selected weights renormalised to sum 1, experts stored as merged 3-D
// tensors (ffn_{gate,up,down}_exps), outputs weighted and summed.
#include "models/builders.h"
#include "models/tensor_table.h"

namespace opal {
namespace {

void declare(TensorTable& t, const HParams& hp) {
  declare_common(t, hp);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    declare_attention(t, hp, il, /*biases=*/false, /*qk_norm=*/true);
    declare_moe(t, hp, il);
  }
}

Tensor* ffn(BuildContext& c, int64_t il, Tensor* x) {
  MoeWeights w;
  w.router = &c.model.require(TensorTable::layer(il, "ffn_gate_inp"));
  w.gate_exps = &c.model.require(TensorTable::layer(il, "ffn_gate_exps"));
  w.up_exps = &c.model.require(TensorTable::layer(il, "ffn_up_exps"));
  w.down_exps = &c.model.require(TensorTable::layer(il, "ffn_down_exps"));
  w.normalize = true;
  return build_moe(c, x, w);
}

Tensor* build(BuildContext& c) { return build_decoder(c, {attention_weights, ffn}); }

}  // namespace

extern const Architecture kArchQwen3Moe{"qwen3moe", RopeMode::Neox, declare, build};

}  // namespace opal
