// The architecture table: one row per GGUF `general.architecture`, each a
// DecoderDesc (models/architecture.h) built by the one decoder in
// models/decoder.cpp. Adding a variant of these families is adding a row;
// docs/adding-an-architecture.md says what a family outside them needs.
#include "models/architecture.h"

#include "core/error.h"
#include "models/decoder.h"
#include "models/gemma4.h"

namespace opal {
namespace {

Architecture row(std::string name, DecoderDesc d) {
  return {std::move(name), d, declare_decoder, build_decoder, nullptr};
}

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> kRows = {
      // Llama family (Llama 2, Llama 3.x with `rope_freqs` frequency factors, TinyLlama, SmolLM2, Mistral,
      // stories*): pre-norm decoder, GQA attention with "normal" (interleaved-pair) RoPE — the converter
      // permutes Q/K rows for it — and a SwiGLU FFN. Some converters emit Q/K/V biases: taken when present.
      row("llama", {.rope_mode = RopeMode::Normal, .rope_freqs = Presence::Optional, .qkv_bias = Presence::Optional}),
      // Qwen2: the llama layout with biases on Q, K and V, NeoX RoPE, often tied embeddings.
      row("qwen2", {.rope_mode = RopeMode::Neox, .qkv_bias = Presence::Required}),
      // Qwen3: per-head RMS norm of Q and K before RoPE (QK-norm), NeoX RoPE, head size from
      // attention.key_length (128 even where n_embd / n_head is smaller), no biases, usually tied embeddings.
      row("qwen3", {.rope_mode = RopeMode::Neox, .qk_norm = Presence::Required}),
      // Qwen3-MoE: Qwen3 attention with a mixture-of-experts FFN: softmax router over expert_count experts,
      // top expert_used_count, selected weights renormalised to sum 1, experts stored as merged 3-D tensors
      // (ffn_{gate,up,down}_exps), outputs weighted and summed.
      row("qwen3moe", {.rope_mode = RopeMode::Neox,
                       .qk_norm = Presence::Required,
                       .ffn = FfnKind::MoeSwiGlu,
                       .moe_renormalize = true}),
      // RWKV-7 (issue 17): a recurrent block over a per-sequence state, its own declare/build (models/rwkv7.cpp).
      rwkv7_architecture(),
      // Gemma 3 (1B-27B): QK-norm and NeoX RoPE as qwen3, plus RMS norms after attention and after the FFN
      // (before each residual add), embeddings * sqrt(n_embd), a GELU(tanh)-gated FFN, q scaled by
      // 1/sqrt(head_dim) before attention, tied output; sliding-window layers in the file's pattern (period 6
      // when absent) with RoPE base 10000 and no scaling, global layers with rope.freq_base and its scaling.
      // Logits soft-capped only when final_logit_softcapping is present.
      row("gemma3", {.rope_mode = RopeMode::Neox,
                     .qk_norm = Presence::Required,
                     .ffn = FfnKind::GeluGated,
                     .output = OutputHead::OwnOrTied,
                     .attention = AttentionPattern::SlidingThenGlobal,
                     .sliding_period = 6,
                     .rope_base_swa = 10000.0f,
                     .norms = NormPlacement::PreAndPost,
                     .embed_scale = EmbedScale::SqrtEmbd,
                     .attn_scale = AttentionScale::ScaleQ}),
      // Gemma 4 (E2B/E4B layout): its own declarations and graph (models/gemma4.cpp: per-layer embeddings, KV
      // sharing, per-layer head and FFN sizes, V norm, attention scale 1, layer output scale); the fields below
      // are what layer_attention() and the shared pieces read: NeoX RoPE with rope_freqs on global layers only,
      // the file's sliding pattern (period 5 when absent) and freq_base_swa, soft-cap 30 when absent.
      {"gemma4",
       {.rope_mode = RopeMode::Neox,
        .rope_freqs = Presence::Optional,
        .qk_norm = Presence::Required,
        .ffn = FfnKind::GeluGated,
        .attention = AttentionPattern::SlidingThenGlobal,
        .sliding_period = 5,
        .norms = NormPlacement::PreAndPost,
        .embed_scale = EmbedScale::SqrtEmbd,
        .default_logit_softcap = 30.0f},
       declare_gemma4,
       build_gemma4,
       nullptr},
  };
  return kRows;
}

}  // namespace

std::vector<std::string> architecture_names() {
  std::vector<std::string> n;
  for (const Architecture& a : architectures()) n.push_back(a.name);
  return n;
}

const Architecture& find_architecture(const std::string& name) {
  for (const Architecture& a : architectures())
    if (a.name == name) return a;
  std::string known;
  for (const auto& n : architecture_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown model architecture '{}' (supported: {})", name, known);
}

}  // namespace opal
