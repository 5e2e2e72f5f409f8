// Qwen2: the llama layout with biases on Q, K and V, NeoX RoPE, often tied
// embeddings.
#include "models/builders.h"
#include "models/tensor_table.h"

namespace opal {
namespace {

void declare(TensorTable& t, const HParams& hp) {
  declare_common(t, hp);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    declare_attention(t, hp, il, /*biases=*/true, /*qk_norm=*/false);
    declare_ffn(t, hp, il);
  }
}

Tensor* ffn(BuildContext& c, int64_t il, Tensor* x) { return build_ffn(c, x, ffn_weights(c.model, il)); }

Tensor* build(BuildContext& c) { return build_decoder(c, {attention_weights, ffn}); }

}  // namespace

extern const Architecture kArchQwen2{"qwen2", RopeMode::Neox, declare, build};

}  // namespace opal
