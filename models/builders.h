// Shared graph builders used by every architecture file: RMS norm, attention
// with RoPE and the KV cache, dense SwiGLU FFN, MoE FFN, and the decoder
// skeleton (embeddings -> layers -> output norm -> lm head). An architecture
// picks its weights and options; the order of operations follows llama.cpp's
// so that numerics match its goldens.
#pragma once
#include "models/architecture.h"
#include "models/model.h"

namespace opal {

struct AttentionWeights {
  Tensor* wq = nullptr;
  Tensor* wk = nullptr;
  Tensor* wv = nullptr;
  Tensor* wo = nullptr;
  Tensor* bq = nullptr;  // optional biases (qwen2)
  Tensor* bk = nullptr;
  Tensor* bv = nullptr;
  Tensor* q_norm = nullptr;  // optional per-head RMS norm (qwen3)
  Tensor* k_norm = nullptr;
};

struct FfnWeights {
  Tensor* gate = nullptr;
  Tensor* up = nullptr;
  Tensor* down = nullptr;
};

struct MoeWeights {
  Tensor* router = nullptr;  // ffn_gate_inp [n_embd, n_expert]
  Tensor* gate_exps = nullptr;
  Tensor* up_exps = nullptr;
  Tensor* down_exps = nullptr;
  bool normalize = true;  // renormalise the selected experts' weights to sum 1
};

Tensor* build_rms_norm(BuildContext& c, Tensor* x, Tensor* weight);
Tensor* build_attention(BuildContext& c, int64_t il, Tensor* x, const AttentionWeights& w);
Tensor* build_ffn(BuildContext& c, Tensor* x, const FfnWeights& w);
Tensor* build_moe(BuildContext& c, Tensor* x, const MoeWeights& w);

// The decoder skeleton. `layer_attn` / `layer_ffn` give each layer's weights.
struct DecoderSpec {
  AttentionWeights (*attn)(const Model& m, int64_t il) = nullptr;
  Tensor* (*ffn)(BuildContext& c, int64_t il, Tensor* x) = nullptr;
};
Tensor* build_decoder(BuildContext& c, const DecoderSpec& spec);

// Declarations shared by the architectures.
void declare_common(TensorTable& t, const HParams& hp);  // token_embd, output_norm, output (optional)
void declare_attention(TensorTable& t, const HParams& hp, int64_t il, bool biases, bool qk_norm);
void declare_ffn(TensorTable& t, const HParams& hp, int64_t il);
void declare_moe(TensorTable& t, const HParams& hp, int64_t il);
AttentionWeights attention_weights(const Model& m, int64_t il);
FfnWeights ffn_weights(const Model& m, int64_t il);

}  // namespace opal
