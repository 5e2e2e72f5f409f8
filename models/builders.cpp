#include "models/builders.h"

#include <cmath>

#include "core/error.h"
#include "models/tensor_table.h"

namespace opal {

using TT = TensorTable;

Tensor* build_rms_norm(BuildContext& c, Tensor* x, Tensor* weight) {
  return c.g.mul(c.g.rms_norm(x, c.hp.rms_eps), weight);
}

Tensor* build_attention(BuildContext& c, int64_t il, Tensor* x, const AttentionWeights& w, const LayerAttention& la) {
  const RopeParams& rope = la.rope;
  Graph& g = c.g;
  const HParams& hp = c.hp;
  const int64_t T = c.n_tokens;
  Tensor* q = g.mul_mat(w.wq, x);
  Tensor* k = g.mul_mat(w.wk, x);
  Tensor* v = g.mul_mat(w.wv, x);
  if (w.bq) q = g.add(q, w.bq);
  if (w.bk) k = g.add(k, w.bk);
  if (w.bv) v = g.add(v, w.bv);
  g.named(q, fmt::format("blk.{}.q", il));
  q = g.reshape(q, {hp.head_dim_k, hp.n_head, T, 1});
  k = g.reshape(k, {hp.head_dim_k, hp.n_head_kv, T, 1});
  if (w.q_norm) q = build_rms_norm(c, q, w.q_norm);
  if (w.k_norm) k = build_rms_norm(c, k, w.k_norm);
  Tensor* freqs = la.freq_factors ? c.model.weight("rope_freqs.weight") : nullptr;
  q = build_rope(g, q, c.in.positions, freqs, rope);
  k = build_rope(g, k, c.in.positions, freqs, rope);
  if (la.q_scale > 0.0f) q = g.scale(q, la.q_scale);
  const bool own_cache = la.kind == AttentionKind::SlidingWindow && c.in.swa_cell_info;  // the sliding cache
  Tensor* cells = own_cache ? c.in.swa_store_cells : c.in.store_cells;
  Tensor* ks = g.kv_store(c.in.k_cache[il], k, cells);
  Tensor* vs = g.kv_store(c.in.v_cache[il], v, cells);
  Tensor* a = g.attention(q, ks, vs, c.in.token_info, own_cache ? c.in.swa_cell_info : c.in.cell_info,
                          int(hp.n_head_kv), la.kq_scale, la.window, c.in.flash_attn);
  g.named(a, fmt::format("blk.{}.attn", il));
  return g.named(g.mul_mat(w.wo, a), fmt::format("blk.{}.attn_out", il));
}

Tensor* build_ffn(BuildContext& c, Tensor* x, const FfnWeights& w) {
  Tensor* gate = c.g.mul_mat(w.gate, x);
  Tensor* up = c.g.mul_mat(w.up, x);
  return c.g.mul_mat(w.down, c.g.swiglu(gate, up));
}

Tensor* build_ffn_geglu(BuildContext& c, Tensor* x, const FfnWeights& w) {
  Tensor* gate = c.g.mul_mat(w.gate, x);
  Tensor* up = c.g.mul_mat(w.up, x);
  return c.g.mul_mat(w.down, c.g.geglu(gate, up));
}

Tensor* build_moe(BuildContext& c, Tensor* x, const MoeWeights& w) {
  Graph& g = c.g;
  const int64_t T = c.n_tokens, E = c.hp.n_expert, K = c.hp.n_expert_used, D = c.hp.n_embd;
  Tensor* probs = g.softmax(g.mul_mat(w.router, x));                  // [E, T]
  Tensor* ids = g.top_k(probs, int(K));                               // [K, T]
  Tensor* weights = g.get_rows(g.reshape(probs, {1, E, T, 1}), ids);  // [1, K, T]
  if (w.normalize) {
    Tensor* w2 = g.reshape(weights, {K, T, 1, 1});
    weights = g.reshape(g.div(w2, g.sum_rows(w2)), {1, K, T, 1});
  }
  Tensor* x3 = g.reshape(x, {D, 1, T, 1});
  Tensor* up = g.mul_mat_id(w.up_exps, x3, ids);  // [F, K, T]
  Tensor* gate = g.mul_mat_id(w.gate_exps, x3, ids);
  Tensor* experts = g.mul_mat_id(w.down_exps, g.swiglu(gate, up), ids);  // [D, K, T]
  experts = g.mul(experts, weights);
  auto expert = [&](int64_t j) {
    return g.view(experts, {D, T, 1, 1}, {experts->nb[0], experts->nb[2], experts->nb[2] * uint64_t(T), 0},
                  uint64_t(j) * experts->nb[1]);
  };
  Tensor* out = expert(0);
  if (K == 1) return g.cpy(out, DType::F32);
  for (int64_t j = 1; j < K; ++j) out = g.add(out, expert(j));
  return out;
}

Tensor* declare_as(TensorTable& t, Presence p, const std::string& name, std::vector<int64_t> shape) {
  switch (p) {
    case Presence::Absent: return nullptr;
    case Presence::Optional: return t.optional(name, std::move(shape));
    case Presence::Required: return t.require(name, std::move(shape));
  }
  return nullptr;
}

void declare_common(TensorTable& t, const HParams& hp, OutputHead head) {
  t.require("token_embd.weight", {hp.n_embd, hp.n_vocab});
  t.require("output_norm.weight", {hp.n_embd});
  const Presence own = head == OutputHead::Own         ? Presence::Required
                       : head == OutputHead::OwnOrTied ? Presence::Optional
                                                       : Presence::Absent;
  declare_as(t, own, "output.weight", {hp.n_embd, hp.n_vocab});
}

void declare_attention(TensorTable& t, const HParams& hp, int64_t il, Presence biases, Presence qk_norm) {
  const int64_t q = hp.n_head * hp.head_dim_k, k = hp.n_embd_k_gqa(), v = hp.n_embd_v_gqa();
  t.require(TT::layer(il, "attn_norm"), {hp.n_embd});
  t.require(TT::layer(il, "attn_q"), {hp.n_embd, q});
  t.require(TT::layer(il, "attn_k"), {hp.n_embd, k});
  t.require(TT::layer(il, "attn_v"), {hp.n_embd, v});
  t.require(TT::layer(il, "attn_output"), {hp.n_head * hp.head_dim_v, hp.n_embd});
  declare_as(t, biases, TT::layer(il, "attn_q", "bias"), {q});
  declare_as(t, biases, TT::layer(il, "attn_k", "bias"), {k});
  declare_as(t, biases, TT::layer(il, "attn_v", "bias"), {v});
  declare_as(t, qk_norm, TT::layer(il, "attn_q_norm"), {hp.head_dim_k});
  declare_as(t, qk_norm, TT::layer(il, "attn_k_norm"), {hp.head_dim_k});
  t.require(TT::layer(il, "ffn_norm"), {hp.n_embd});
}

void declare_post_norms(TensorTable& t, const HParams& hp, int64_t il) {
  t.require(TT::layer(il, "post_attention_norm"), {hp.n_embd});
  t.require(TT::layer(il, "post_ffw_norm"), {hp.n_embd});
}

void declare_ffn(TensorTable& t, const HParams& hp, int64_t il) {
  if (hp.n_ff <= 0) fail("{}.feed_forward_length is missing or zero", hp.arch);
  t.require(TT::layer(il, "ffn_gate"), {hp.n_embd, hp.n_ff});
  t.require(TT::layer(il, "ffn_up"), {hp.n_embd, hp.n_ff});
  t.require(TT::layer(il, "ffn_down"), {hp.n_ff, hp.n_embd});
}

void declare_moe(TensorTable& t, const HParams& hp, int64_t il) {
  if (hp.n_expert <= 0 || hp.n_expert_used <= 0)
    fail("{}: expert_count and expert_used_count must be positive for a MoE model", hp.arch);
  const int64_t f = hp.n_ff_exp > 0 ? hp.n_ff_exp : hp.n_ff;
  t.require(TT::layer(il, "ffn_gate_inp"), {hp.n_embd, hp.n_expert});
  t.require(TT::layer(il, "ffn_gate_exps"), {hp.n_embd, f, hp.n_expert});
  t.require(TT::layer(il, "ffn_up_exps"), {hp.n_embd, f, hp.n_expert});
  t.require(TT::layer(il, "ffn_down_exps"), {f, hp.n_embd, hp.n_expert});
}

AttentionWeights attention_weights(const Model& m, int64_t il) {
  AttentionWeights w;
  w.wq = &m.require(TT::layer(il, "attn_q"));
  w.wk = &m.require(TT::layer(il, "attn_k"));
  w.wv = &m.require(TT::layer(il, "attn_v"));
  w.wo = &m.require(TT::layer(il, "attn_output"));
  w.bq = m.weight(TT::layer(il, "attn_q", "bias"));
  w.bk = m.weight(TT::layer(il, "attn_k", "bias"));
  w.bv = m.weight(TT::layer(il, "attn_v", "bias"));
  w.q_norm = m.weight(TT::layer(il, "attn_q_norm"));
  w.k_norm = m.weight(TT::layer(il, "attn_k_norm"));
  return w;
}

FfnWeights ffn_weights(const Model& m, int64_t il) {
  return {&m.require(TT::layer(il, "ffn_gate")), &m.require(TT::layer(il, "ffn_up")),
          &m.require(TT::layer(il, "ffn_down"))};
}

MoeWeights moe_weights(const Model& m, int64_t il, bool normalize) {
  MoeWeights w;
  w.router = &m.require(TT::layer(il, "ffn_gate_inp"));
  w.gate_exps = &m.require(TT::layer(il, "ffn_gate_exps"));
  w.up_exps = &m.require(TT::layer(il, "ffn_up_exps"));
  w.down_exps = &m.require(TT::layer(il, "ffn_down_exps"));
  w.normalize = normalize;
  return w;
}

}  // namespace opal
