// The decoder of every architecture row: declarations and the forward graph
// from the row's DecoderDesc. The order of operations is llama.cpp's
// (llm_build_llama / qwen2 / qwen3 / qwen3moe) so that logits match its
// goldens bit for bit (tests/engine/test_fidelity.cpp): changing the order of
// any two ops here changes every golden.
#include "models/decoder.h"

#include <fmt/format.h>

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
    case FfnKind::GeluGated: break;
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
  if (d.attention != AttentionPattern::AllGlobal) no("sliding-window attention layers");
  if (d.norms != NormPlacement::Pre) no("post-attention / post-FFN norms");
  if (d.embed_scale != EmbedScale::None) no("embedding scaling");
  if (d.ffn == FfnKind::GeluGated) no("a GELU-gated FFN");
}

LayerAttention layer_attention(const DecoderDesc& d, const HParams& hp, int64_t il) {
  LayerAttention a;
  a.rope = hp.rope_params();
  switch (d.attention) {
    case AttentionPattern::AllGlobal: return a;
    case AttentionPattern::SlidingThenGlobal:
      // Gemma 3: sliding layers use the local RoPE base and a window; declare_decoder rejects this for now.
      a.kind = d.sliding_period > 0 && (il + 1) % d.sliding_period == 0 ? AttentionKind::Global
                                                                        : AttentionKind::SlidingWindow;
      return a;
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
    switch (d.ffn) {
      case FfnKind::SwiGlu: declare_ffn(t, hp, il); break;
      case FfnKind::MoeSwiGlu: declare_moe(t, hp, il); break;
      case FfnKind::GeluGated: break;  // rejected by require_implemented
    }
  }
}

namespace {

// One pre-norm attention block: x + attn(norm(x)), then h + ffn(norm(h)).
Tensor* build_attention_block(BuildContext& c, const DecoderDesc& d, int64_t il, Tensor* inp) {
  Graph& g = c.g;
  const Model& m = c.model;
  const LayerAttention la = layer_attention(d, c.hp, il);
  if (la.kind != AttentionKind::Global)
    fail("{}: layer {}: sliding-window attention is not implemented", c.hp.arch, il);
  Tensor* cur = build_rms_norm(c, inp, &m.require(TT::layer(il, "attn_norm")));
  cur = build_attention(c, il, cur, attention_weights(m, il), la.rope);
  Tensor* ffn_inp = g.add(cur, inp);
  cur = build_rms_norm(c, ffn_inp, &m.require(TT::layer(il, "ffn_norm")));
  cur = build_layer_ffn(c, d, il, cur);
  return g.named(g.add(cur, ffn_inp), fmt::format("blk.{}.out", il));
}

}  // namespace

Tensor* build_decoder(BuildContext& c) {
  Graph& g = c.g;
  const Model& m = c.model;
  const DecoderDesc& d = m.arch().decoder;
  Tensor* inp = g.named(g.get_rows(&m.require("token_embd.weight"), c.in.tokens), "embd");
  for (int64_t il = 0; il < c.hp.n_layer; ++il) {
    switch (d.block) {
      case BlockKind::Attention: inp = build_attention_block(c, d, il, inp); break;
      case BlockKind::Recurrent: fail("{}: recurrent blocks are not implemented", c.hp.arch);
    }
  }
  Tensor* cur = inp;
  if (c.in.out_ids) cur = g.get_rows(cur, c.in.out_ids);
  cur = build_rms_norm(c, cur, &m.require("output_norm.weight"));
  Tensor* head = d.output == OutputHead::Tied ? nullptr : m.weight("output.weight");
  if (!head) head = &m.require("token_embd.weight");  // tied embeddings
  return g.named(g.mul_mat(head, cur), "logits");
}

}  // namespace opal
