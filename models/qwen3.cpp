// Qwen3: per-head RMS norm of Q and K before RoPE (QK-norm), NeoX RoPE, head
// size from attention.key_length (128 even where n_embd / n_head is smaller),
// no biases, usually tied embeddings.
#include "models/builders.h"
#include "models/tensor_table.h"

namespace opal {
namespace {

void declare(TensorTable& t, const HParams& hp) {
  declare_common(t, hp);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    declare_attention(t, hp, il, /*biases=*/false, /*qk_norm=*/true);
    declare_ffn(t, hp, il);
  }
}

Tensor* ffn(BuildContext& c, int64_t il, Tensor* x) { return build_ffn(c, x, ffn_weights(c.model, il)); }

Tensor* build(BuildContext& c) { return build_decoder(c, {attention_weights, ffn}); }

}  // namespace

extern const Architecture kArchQwen3{"qwen3", RopeMode::Neox, declare, build};

}  // namespace opal
