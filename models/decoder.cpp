// The decoder of every architecture row: declarations and the forward graph
// from the row's DecoderDesc. The order of operations is llama.cpp's
// (llm_build_llama / qwen2 / qwen3 / qwen3moe / gemma3) so that logits match its
// goldens bit for bit (tests/engine/test_fidelity.cpp): changing the order of
// any two ops here changes every golden.
#include "models/decoder.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "models/builders.h"
#include "models/tensor_table.h"

namespace opal {

using TT = TensorTable;

namespace {

Tensor* build_layer_ffn(BuildContext& c, const DecoderDesc& d, int64_t il, Tensor* x) {
  switch (d.ffn) {
    case FfnKind::SwiGlu: return build_ffn(c, x, ffn_weights(c.model, il));
    case FfnKind::MoeSwiGlu: return build_moe(c, x, moe_weights(c.model, il, d.moe_renormalize));
    case FfnKind::GeluGated: return build_ffn_geglu(c, x, ffn_weights(c.model, il));
  }
  fail("{}: FFN kind not implemented", c.hp.arch);
}

}  // namespace

// The seams that are named but not built yet (docs/adding-an-architecture.md).
void require_implemented(const Architecture& a) {
  const DecoderDesc& d = a.decoder;
  auto no = [&](const char* what) {
    fail("architecture '{}' needs {}, which is not implemented yet (see docs/adding-an-architecture.md)", a.name, what);
  };
  if (d.block != BlockKind::Attention) no("a recurrent block (time mix / channel mix over a per-sequence state)");
}

LayerAttention layer_attention(const DecoderDesc& d, const HParams& hp, int64_t il) {
  LayerAttention a;
  a.rope = hp.rope_params();
  switch (d.attn_scale) {
    case AttentionScale::InvSqrtHeadDim: a.kq_scale = 1.0f / std::sqrt(float(hp.head_dim_k)); break;
    case AttentionScale::ScaleQ:
      // llama.cpp's gemma3: 1/sqrt(n_embd / n_head) for the 27B (62 layers), else 1/sqrt(head_dim).
      a.q_scale =
          hp.n_layer == 62 ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head)) : 1.0f / std::sqrt(float(hp.head_dim_k));
      a.kq_scale = 1.0f;
      break;
  }
  if (d.attention == AttentionPattern::SlidingThenGlobal && hp.is_swa(il)) {
    a.kind = AttentionKind::SlidingWindow;
    a.window = int(hp.n_swa);
    a.freq_factors = false;
    a.rope.n_rot = int(hp.n_rot_swa);
    a.rope.freq_base = d.rope_base_swa > 0.0f ? d.rope_base_swa : hp.rope_freq_base_swa;
    a.rope.freq_scale = d.rope_base_swa > 0.0f ? 1.0f : hp.rope_freq_scale_swa;
  }
  return a;
}

void declare_decoder(const Architecture& a, TensorTable& t, const HParams& hp) {
  require_implemented(a);
  const DecoderDesc& d = a.decoder;
  declare_common(t, hp, d.output);
  declare_as(t, d.rope_freqs, "rope_freqs.weight", {hp.n_rot / 2});
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    declare_attention(t, hp, il, d.qkv_bias, d.qk_norm);
    if (d.norms == NormPlacement::PreAndPost) declare_post_norms(t, hp, il);
    switch (d.ffn) {
      case FfnKind::SwiGlu:
      case FfnKind::GeluGated: declare_ffn(t, hp, il); break;
      case FfnKind::MoeSwiGlu: declare_moe(t, hp, il); break;
    }
  }
}

namespace {

// One attention block: x + attn(norm(x)), then h + ffn(norm(h)); with post
// norms (Gemma) x + post_norm(attn(norm(x))) and h + post_norm(ffn(norm(h))).
Tensor* build_attention_block(BuildContext& c, const DecoderDesc& d, int64_t il, Tensor* inp) {
  Graph& g = c.g;
  const Model& m = c.model;
  const bool post = d.norms == NormPlacement::PreAndPost;
  const LayerAttention la = layer_attention(d, c.hp, il);
  Tensor* cur = build_rms_norm(c, inp, &m.require(TT::layer(il, "attn_norm")));
  cur = build_attention(c, il, cur, attention_weights(m, il), la);
  if (post) cur = build_rms_norm(c, cur, &m.require(TT::layer(il, "post_attention_norm")));
  Tensor* ffn_inp = g.add(cur, inp);
  cur = build_rms_norm(c, ffn_inp, &m.require(TT::layer(il, "ffn_norm")));
  cur = build_layer_ffn(c, d, il, cur);
  if (post) cur = build_rms_norm(c, cur, &m.require(TT::layer(il, "post_ffw_norm")));
  return g.named(g.add(cur, ffn_inp), fmt::format("blk.{}.out", il));
}

}  // namespace

Tensor* build_decoder(BuildContext& c) {
  Graph& g = c.g;
  const Model& m = c.model;
  const DecoderDesc& d = m.arch().decoder;
  Tensor* inp = g.named(g.get_rows(&m.require("token_embd.weight"), c.in.tokens), "embd");
  if (d.embed_scale == EmbedScale::SqrtEmbd) inp = g.scale(inp, sqrtf(float(c.hp.n_embd)));
  for (int64_t il = 0; il < c.hp.n_layer; ++il) {
    switch (d.block) {
      case BlockKind::Attention: inp = build_attention_block(c, d, il, inp); break;
      case BlockKind::Recurrent: fail("{}: recurrent blocks are not implemented", c.hp.arch);
    }
  }
  Tensor* cur = inp;
  if (c.in.out_ids) cur = g.get_rows(cur, c.in.out_ids);
  cur = build_rms_norm(c, cur, &m.require("output_norm.weight"));
  if (c.hidden) return g.named(cur, "result_norm");
  Tensor* head = d.output == OutputHead::Tied ? nullptr : m.weight("output.weight");
  if (!head) head = &m.require("token_embd.weight");  // tied embeddings
  cur = g.mul_mat(head, cur);
  if (const float cap = c.hp.final_logit_softcap; cap > 0.0f)  // Gemma: cap * tanh(logits / cap)
    cur = g.softcap(cur, cap);                                 // one UNARY node, rounded as SCALE, tanh, SCALE
  return g.named(cur, "logits");
}

}  // namespace opal
