// Gemma 4 as llama.cpp reads it (the gemma4 graph builder; facts in
// docs/models/gemma.md and ../shared/golden/README.md "gemma4"):
//   x = token_embd[t] * sqrt(n_embd)
//   per-layer inputs, once per token: P = per_layer_token_embd[t] * sqrt(n_pl)
//     ([n_pl, n_layer], layer-major); Q = RMSNorm_each(per_layer_model_proj x
//     / sqrt(n_embd); per_layer_proj_norm); pl = (Q + P) / sqrt(2)
//   layer il: h = RMSNorm(x; attn_norm)
//     q = RoPE(RMSNorm_head(W_q h; attn_q_norm)); for a layer with its own
//     K/V: k = RoPE(RMSNorm_head(W_k h; attn_k_norm)), v = RMSNorm_head(W_v h)
//     (no weight), stored in its cache; the last shared_kv_layers layers
//     attend over the last earlier layer of their kind that has K/V;
//     attention scale 1; sliding layers: window, head size key_length_swa,
//     RoPE base freq_base_swa over rope.dimension_count_swa dims; global
//     layers: "proportional" RoPE through rope_freqs.weight
//     a = post_attention_norm(W_o attn) + x
//     y = post_ffw_norm(down(gelu(gate ffn_norm(a)) * up ffn_norm(a))) + a
//     y += post_norm(W_proj (gelu(W_inp_gate y) * pl[il]))
//     x = y * layer_output_scale
//   logits = cap * tanh((token_embd RMSNorm(x; output_norm)) / cap), cap =
//   final_logit_softcapping (30 when absent).
#include "models/gemma4.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "graph/rope.h"
#include "models/builders.h"
#include "models/decoder.h"
#include "models/tensor_table.h"

namespace opal {

using TT = TensorTable;

namespace {

// The layer whose K/V layer il reads: its own, or (KV sharing) the last
// earlier layer of the same kind that has K/V. llama.cpp's rule (n_kv - 2
// for a sliding layer, n_kv - 1 for a global one, n_kv = block_count -
// shared_kv_layers) is this one for the Gemma 4 patterns, whose last two
// layers before n_kv are one sliding and one global.
int64_t kv_source(const HParams& hp, int64_t il) {
  if (hp.has_kv(il)) return il;
  for (int64_t j = hp.n_layer - hp.n_shared_kv_layers - 1; j >= 0; --j)
    if (hp.is_swa(j) == hp.is_swa(il)) return j;
  fail("{}: layer {} shares K/V but no earlier {} layer has its own", hp.arch, il,
       hp.is_swa(il) ? "sliding-window" : "global");
}

}  // namespace

void declare_gemma4(const Architecture&, TensorTable& t, const HParams& hp) {
  const int64_t npl = hp.n_embd_per_layer, L = hp.n_layer, E = hp.n_embd;
  if (npl <= 0) fail("{}: {}.embedding_length_per_layer_input is missing or zero", hp.arch, hp.arch);
  t.require("token_embd.weight", {E, hp.n_vocab});
  t.require("per_layer_token_embd.weight", {npl * L, hp.n_vocab});
  t.require("per_layer_model_proj.weight", {E, npl * L});
  t.require("per_layer_proj_norm.weight", {npl});
  t.require("output_norm.weight", {E});
  t.optional("rope_freqs.weight", {hp.n_rot / 2});
  for (int64_t il = 0; il < L; ++il) {
    const int64_t hd = hp.head_dim_k_at(il), hdv = hp.head_dim_v_at(il), ff = hp.n_ff_at(il);
    if (ff <= 0) fail("{}: layer {}: feed_forward_length is missing or zero", hp.arch, il);
    t.require(TT::layer(il, "attn_norm"), {E});
    t.require(TT::layer(il, "attn_q"), {E, hp.n_head * hd});
    t.require(TT::layer(il, "attn_q_norm"), {hd});
    if (hp.has_kv(il)) {
      t.require(TT::layer(il, "attn_k"), {E, hp.n_head_kv * hd});
      t.require(TT::layer(il, "attn_v"), {E, hp.n_head_kv * hdv});
      t.require(TT::layer(il, "attn_k_norm"), {hd});
    } else {
      kv_source(hp, il);  // fails if there is none
    }
    t.require(TT::layer(il, "attn_output"), {hp.n_head * hdv, E});
    t.require(TT::layer(il, "post_attention_norm"), {E});
    t.require(TT::layer(il, "ffn_norm"), {E});
    t.require(TT::layer(il, "ffn_gate"), {E, ff});
    t.require(TT::layer(il, "ffn_up"), {E, ff});
    t.require(TT::layer(il, "ffn_down"), {ff, E});
    t.require(TT::layer(il, "post_ffw_norm"), {E});
    t.require(TT::layer(il, "inp_gate"), {E, npl});
    t.require(TT::layer(il, "proj"), {npl, E});
    t.require(TT::layer(il, "post_norm"), {E});
    t.require(TT::layer(il, "layer_output_scale"), {1});
  }
}

Tensor* build_gemma4(BuildContext& c) {
  Graph& g = c.g;
  const Model& m = c.model;
  const HParams& hp = c.hp;
  const DecoderDesc& d = m.arch().decoder;
  const int64_t T = c.n_tokens, L = hp.n_layer, npl = hp.n_embd_per_layer, E = hp.n_embd;
  auto w = [&](int64_t il, const char* name) { return &m.require(TT::layer(il, name)); };

  Tensor* x = g.named(g.get_rows(&m.require("token_embd.weight"), c.in.tokens), "embd");
  x = g.scale(x, sqrtf(float(E)));
  // Per-layer inputs [n_pl, n_layer, T].
  Tensor* pe = g.get_rows(&m.require("per_layer_token_embd.weight"), c.in.tokens);
  pe = g.reshape(g.scale(pe, sqrtf(float(npl))), {npl, L, T, 1});
  Tensor* pp = g.scale(g.mul_mat(&m.require("per_layer_model_proj.weight"), x), 1.0f / sqrtf(float(E)));
  pp = build_rms_norm(c, g.reshape(pp, {npl, L, T, 1}), &m.require("per_layer_proj_norm.weight"));
  Tensor* pl = g.named(g.scale(g.add(pp, pe), 1.0f / sqrtf(2.0f)), "per_layer_inputs");

  std::vector<Tensor*> ks(size_t(L), nullptr), vs(size_t(L), nullptr);
  for (int64_t il = 0; il < L; ++il) {
    const LayerAttention la = layer_attention(d, hp, il);
    const bool sliding = la.kind == AttentionKind::SlidingWindow && c.in.swa_cell_info;  // its own cache
    const int64_t hd = hp.head_dim_k_at(il), hdv = hp.head_dim_v_at(il);
    Tensor* freqs = la.freq_factors ? m.weight("rope_freqs.weight") : nullptr;
    Tensor* h = build_rms_norm(c, x, w(il, "attn_norm"));
    Tensor* q = g.reshape(g.mul_mat(w(il, "attn_q"), h), {hd, hp.n_head, T, 1});
    q = build_rope(g, build_rms_norm(c, q, w(il, "attn_q_norm")), c.in.positions, freqs, la.rope);
    const int64_t src = kv_source(hp, il);
    if (src == il) {
      Tensor* k = g.reshape(g.mul_mat(w(il, "attn_k"), h), {hd, hp.n_head_kv, T, 1});
      k = build_rope(g, build_rms_norm(c, k, w(il, "attn_k_norm")), c.in.positions, freqs, la.rope);
      Tensor* v = g.rms_norm(g.reshape(g.mul_mat(w(il, "attn_v"), h), {hdv, hp.n_head_kv, T, 1}), hp.rms_eps);
      Tensor* cells = sliding ? c.in.swa_store_cells : c.in.store_cells;
      ks[size_t(il)] = g.kv_store(c.in.k_cache[size_t(il)], k, cells);
      vs[size_t(il)] = g.kv_store(c.in.v_cache[size_t(il)], v, cells);
    }
    Tensor* a =
        g.attention(q, ks[size_t(src)], vs[size_t(src)], c.in.token_info, sliding ? c.in.swa_cell_info : c.in.cell_info,
                    int(hp.n_head_kv), 1.0f, la.window, c.in.flash_attn);
    g.named(a, fmt::format("blk.{}.attn", il));
    Tensor* cur = build_rms_norm(c, g.mul_mat(w(il, "attn_output"), a), w(il, "post_attention_norm"));
    Tensor* ffn_inp = g.add(cur, x);
    cur = build_rms_norm(c, ffn_inp, w(il, "ffn_norm"));
    cur = build_ffn_geglu(c, cur, ffn_weights(m, il));
    Tensor* y = g.add(build_rms_norm(c, cur, w(il, "post_ffw_norm")), ffn_inp);
    // The layer's per-layer input.
    Tensor* pli = g.view(pl, {npl, T, 1, 1}, {pl->nb[0], pl->nb[2], pl->nb[2] * uint64_t(T), pl->nb[2] * uint64_t(T)},
                         uint64_t(il) * pl->nb[1]);
    Tensor* gate = g.mul(g.gelu(g.mul_mat(w(il, "inp_gate"), y)), pli);
    y = g.add(y, build_rms_norm(c, g.mul_mat(w(il, "proj"), gate), w(il, "post_norm")));
    x = g.named(g.mul(y, w(il, "layer_output_scale")), fmt::format("blk.{}.out", il));
  }
  if (c.in.out_ids) x = g.get_rows(x, c.in.out_ids);
  x = build_rms_norm(c, x, &m.require("output_norm.weight"));
  if (c.hidden) return g.named(x, "result_norm");
  Tensor* head = m.weight("output.weight");
  if (!head) head = &m.require("token_embd.weight");
  Tensor* logits = g.mul_mat(head, x);
  if (const float cap = hp.final_logit_softcap; cap > 0.0f)
    logits = g.softcap(logits, cap);  // one UNARY node, rounded as SCALE, tanh, SCALE
  return g.named(logits, "logits");
}

}  // namespace opal
