// The one decoder every architecture row uses (models/architecture.cpp): its
// tensor declarations and its forward graph, both driven by the row's
// DecoderDesc (models/architecture.h). The skeleton is embeddings -> layers ->
// output norm -> LM head; a layer is a block of the row's kind, its attention
// of the layer's kind (layer_attention()), its FFN of the row's kind.
#pragma once
#include "graph/rope.h"
#include "models/architecture.h"

namespace opal {

// Declares every tensor `arch` reads. Throws opal::Error naming the
// architecture and the seam when its row asks for one that is not
// implemented (a recurrent block, sliding-window layers, post norms,
// embedding scaling, a GELU FFN).
void declare_decoder(const Architecture& arch, TensorTable& table, const HParams& hp);

// Throws opal::Error naming the architecture and the first seam its row asks
// for that is not implemented; declare_decoder calls it first.
void require_implemented(const Architecture& arch);

// The forward graph of c.model.arch(); returns the logits [n_vocab, n_out].
Tensor* build_decoder(BuildContext& c);

// What layer il's attention is: its kind, window, RoPE and scales.
LayerAttention layer_attention(const DecoderDesc& d, const HParams& hp, int64_t il);

}  // namespace opal
