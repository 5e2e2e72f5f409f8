// Embeddings: a model's hidden state after the output norm, pooled per input.
//
// Each input is its own sequence (positions from 0, causal attention as for
// generation); as many inputs as fit one decode (n_batch and n_ctx tokens,
// n_seq_max sequences) go into the same batch. Pooling is llama.cpp's:
// none (every token's vector), mean (over the input's tokens), cls (the first
// token's), last (the last token's). Vectors are then normalised as
// llama.cpp's common_embd_normalize: -1 none, 0 max-abs scaled to int16 range,
// 2 Euclidean (L2, the default of llama-embedding and llama-server), p > 2 the p-norm.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/context.h"

namespace opal {

// llama.cpp's llama_pooling_type values (GGUF `<arch>.pooling_type`).
enum class Pooling : int32_t { None = 0, Mean = 1, Cls = 2, Last = 3, Rank = 4 };

// "none", "mean", "cls", "last" (and "rank", refused by embed()); throws naming the choices.
Pooling pooling_from_name(const std::string& name);
const char* pooling_name(Pooling p);
// The GGUF's `<arch>.pooling_type`; absent: None, as llama.cpp (its hparams default), so a
// decoder GGUF without the key gives per-token vectors unless pooling is chosen (--pooling).
// Throws for a value that is no pooling type.
Pooling model_pooling(const Model& model);
// Whether the GGUF names a pooling type at all.
bool model_has_pooling(const Model& model);

// Normalises n floats in place (see the file comment for `norm`).
void normalize_embedding(float* v, int64_t n, int norm);

struct EmbedOptions {
  Pooling pooling = Pooling::Last;
  int normalize = 2;
};

// One input's result: one vector (pooled) or one per token (Pooling::None), n_embd floats each.
using EmbeddingVectors = std::vector<std::vector<float>>;

// Embeds every input (token ids) with ctx, which it resets before each batch (a context kept for
// embeddings). Throws opal::Error naming the input for an empty one or one longer than the
// context (n_ctx) or a batch (n_batch), and for rank pooling.
std::vector<EmbeddingVectors> embed(Context& ctx, const std::vector<std::vector<int32_t>>& inputs,
                                    const EmbedOptions& opts);

}  // namespace opal
