// The pieces of a decoder (models/decoder.cpp puts them together per the
// architecture's DecoderDesc): RMS norm, attention with RoPE and the KV cache,
// dense SwiGLU FFN, MoE FFN, and the declarations of their tensors. The order
// of operations follows llama.cpp's so that numerics match its goldens.
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
// `la` is the layer's attention (per layer: sliding-window layers have a window and may have their own RoPE).
Tensor* build_attention(BuildContext& c, int64_t il, Tensor* x, const AttentionWeights& w, const LayerAttention& la);
// down(gelu_tanh(gate x) * up x) (Gemma).
Tensor* build_ffn_geglu(BuildContext& c, Tensor* x, const FfnWeights& w);
Tensor* build_ffn(BuildContext& c, Tensor* x, const FfnWeights& w);
Tensor* build_moe(BuildContext& c, Tensor* x, const MoeWeights& w);

// Declarations; `Presence::Absent` declares nothing, Optional takes the tensor when the file has it.
Tensor* declare_as(TensorTable& t, Presence p, const std::string& name, std::vector<int64_t> shape);
void declare_common(TensorTable& t, const HParams& hp, OutputHead head);  // token_embd, output_norm, output
// attn_norm, attn_{q,k,v,output}, their biases and QK-norms as `biases` / `qk_norm` say, ffn_norm.
void declare_attention(TensorTable& t, const HParams& hp, int64_t il, Presence biases, Presence qk_norm);
// Gemma's blk.N.post_attention_norm and blk.N.post_ffw_norm.
void declare_post_norms(TensorTable& t, const HParams& hp, int64_t il);
void declare_ffn(TensorTable& t, const HParams& hp, int64_t il);
void declare_moe(TensorTable& t, const HParams& hp, int64_t il);
// The layer's weights; optional ones the file lacks (or the architecture does not declare) are null.
AttentionWeights attention_weights(const Model& m, int64_t il);
FfnWeights ffn_weights(const Model& m, int64_t il);
MoeWeights moe_weights(const Model& m, int64_t il, bool normalize);

}  // namespace opal
