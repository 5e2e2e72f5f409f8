// RWKV-7 ("rwkv7", issue 17): the architecture as llama.cpp's llm_build_rwkv7
// defines it, in its order of operations. Not a DecoderDesc variant of the
// attention decoder: a recurrent block kind with its own declare and build
// functions and its own hyperparameters.
//
// Per token: x = LN(token_embd[t]; token_embd_norm) once (each LayerNorm and
// GroupNorm is one NORM node with its weight and bias); per layer a time mix
// (LN attn_norm -> token shift -> six lerps (one LERP node) -> r, w (decay LoRA, tanh,
// exp(-0.606531 sigmoid)), k, v (value residual from layer 0's v through the
// value LoRA, one WKV7_VALUE_MIX node), a (ICLR LoRA, sigmoid), g (gate LoRA, sigmoid) -> L2-normed kk
// per head (the decay, a, kk, the k update and the recurrence's -kk and
// kk * a in one WKV7_INPUTS node) -> the WKV-7 recurrence over the layer's state -> group norm per
// head -> + v * sum(r k r_k) per head -> * g (one WKV7_OUTPUT node) -> output, residual) and a
// channel mix (LN attn_norm_2 -> token shift -> lerp -> relu(key)^2 -> value,
// residual); then LN output_norm and the untied output head. The recurrent
// state per sequence (the last token's two LN outputs per layer and the WKV
// matrices) lives in the runtime (runtime/recurrent_state.h) and is read and
// updated in place by TOKEN_SHIFT and RWKV_WKV7 (graph/graph.h).
// Sub is written as x + (-1 * y), which rounds exactly as x - y.
#include <fmt/format.h>

#include "core/error.h"
#include "models/architecture.h"
#include "models/model.h"
#include "models/tensor_table.h"

namespace opal {
namespace {

using TT = TensorTable;

HParams read_hparams(const gguf::File& f, const std::string& arch) {
  HParams h;
  h.arch = arch;
  h.recurrent = true;
  const std::string p = arch + ".";
  h.n_ctx_train = f.get_int(p + "context_length", 1048576);
  h.n_embd = f.require_int(p + "embedding_length");
  h.n_layer = f.require_int(p + "block_count");
  h.n_ff = f.require_int(p + "feed_forward_length");
  h.n_vocab = f.get_int(p + "vocab_size", 0);
  h.wkv_head_size = f.require_int(p + "wkv.head_size");
  h.lora_decay = f.require_int(p + "attention.decay_lora_rank");
  h.lora_iclr = f.require_int(p + "attention.iclr_lora_rank");
  h.lora_value = f.require_int(p + "attention.value_residual_mix_lora_rank");
  h.lora_gate = f.require_int(p + "attention.gate_lora_rank");
  h.norm_eps = float(f.get_float(p + "attention.layer_norm_epsilon", 1e-5));
  const int64_t shift = f.get_int(p + "token_shift_count", 2);
  const int64_t kLimit = int64_t(1) << 20;
  if (h.n_embd <= 0 || h.n_embd > kLimit || h.n_layer <= 0 || h.n_layer > 4096 || h.n_ff <= 0 || h.n_ff > kLimit)
    fail("{}: implausible hyperparameters (n_embd {}, n_layer {}, n_ff {})", f.path(), h.n_embd, h.n_layer, h.n_ff);
  if (h.wkv_head_size <= 0 || h.wkv_head_size > 1024 || h.n_embd % h.wkv_head_size != 0)
    fail("{}: {}wkv.head_size {} must be positive and divide embedding_length {}", f.path(), p, h.wkv_head_size,
         h.n_embd);
  for (int64_t r : {h.lora_decay, h.lora_iclr, h.lora_value, h.lora_gate})
    if (r <= 0 || r > kLimit) fail("{}: {}attention.*_lora_rank must be positive, found {}", f.path(), p, r);
  if (shift != 2) fail("{}: {}token_shift_count = {} is not supported (RWKV-7 uses 2)", f.path(), p, shift);
  if (!(h.norm_eps > 0.0f)) fail("{}: {}attention.layer_norm_epsilon must be positive", f.path(), p);
  // No attention: one "head" so that code reading these sees sane values; no KV cache is made.
  h.n_head = h.n_head_kv = h.n_wkv_head();
  h.head_dim_k = h.head_dim_v = h.n_rot = h.wkv_head_size;
  return h;
}

void declare(const Architecture&, TensorTable& t, const HParams& hp) {
  const int64_t C = hp.n_embd, F = hp.n_ff, V = hp.n_vocab;
  t.require("token_embd.weight", {C, V});
  for (const char* n : {"token_embd_norm", "output_norm"}) {
    t.require(fmt::format("{}.weight", n), {C});
    t.require(fmt::format("{}.bias", n), {C});
  }
  t.require("output.weight", {C, V});
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    auto req = [&](const char* what, std::vector<int64_t> shape, const char* suffix = "weight") {
      t.require(TT::layer(il, what, suffix), std::move(shape));
    };
    for (const char* n : {"attn_norm", "attn_norm_2", "time_mix_ln"}) {
      req(n, {C});
      req(n, {C}, "bias");
    }
    req("time_mix_lerp_fused", {C, 1, 1, 6});
    auto lora = [&](const char* n0, const char* n1, const char* n2, int64_t rank) {
      req(n0, {C});
      req(n1, {C, rank});
      req(n2, {rank, C});
    };
    lora("time_mix_w0", "time_mix_w1", "time_mix_w2", hp.lora_decay);
    lora("time_mix_a0", "time_mix_a1", "time_mix_a2", hp.lora_iclr);
    // Layer 0 carries the value-residual LoRA too (shaped with the ICLR rank, as llama.cpp) but does not use it.
    lora("time_mix_v0", "time_mix_v1", "time_mix_v2", il == 0 ? hp.lora_iclr : hp.lora_value);
    req("time_mix_g1", {C, hp.lora_gate});
    req("time_mix_g2", {hp.lora_gate, C});
    for (const char* n : {"time_mix_k_k", "time_mix_k_a", "time_mix_r_k"}) req(n, {C});
    for (const char* n : {"time_mix_key", "time_mix_value", "time_mix_receptance", "time_mix_output"}) req(n, {C, C});
    req("channel_mix_lerp_k", {C, 1, 1});
    req("channel_mix_key", {C, F});
    req("channel_mix_value", {F, C});
  }
}

struct Builder {
  BuildContext& c;
  Graph& g;
  const Model& m;
  const HParams& hp;
  int64_t T;

  Tensor* w(int64_t il, const char* what, const char* suffix = "weight") const {
    return &m.require(TT::layer(il, what, suffix));
  }
  Tensor* sub(Tensor* a, Tensor* b) { return g.add(a, g.scale(b, -1.0f)); }
  // LayerNorm with weight and bias (llama.cpp's LLM_NORM: norm, mul, add), one NORM node.
  Tensor* layer_norm(Tensor* x, Tensor* weight, Tensor* bias) { return g.norm(x, hp.norm_eps, weight, bias); }
  Tensor* lora(Tensor* x, Tensor* a1, Tensor* a2, UnaryFn mid, bool has_mid) {
    Tensor* h = g.mul_mat(a1, x);
    if (has_mid) h = g.unary(h, mid);
    return g.mul_mat(a2, h);
  }

  Tensor* time_mix(int64_t il, Tensor* cur, Tensor*& v_first) {
    const int64_t C = hp.n_embd, S = hp.wkv_head_size, H = hp.n_wkv_head();
    Tensor* prev = g.token_shift(cur, c.in.shift_att[size_t(il)], c.in.state_slots);
    // The six lerps cur + (prev - cur) * lerp_i in one LERP node [C, T, 6] (rounded as sub, mul, add).
    Tensor* mixes = g.lerp(cur, prev, w(il, "time_mix_lerp_fused"));
    auto mix = [&](int i) { return g.view(mixes, {C, T, 1, 1}, mixes->nb, uint64_t(i) * mixes->nb[2]); };
    Tensor *xr = mix(0), *xw = mix(1), *xk = mix(2), *xv = mix(3), *xa = mix(4), *xg = mix(5);

    Tensor* r = g.mul_mat(w(il, "time_mix_receptance"), xr);
    Tensor* wl = lora(xw, w(il, "time_mix_w1"), w(il, "time_mix_w2"), UnaryFn::Tanh, true);
    Tensor* k = g.mul_mat(w(il, "time_mix_key"), xk);
    Tensor* v = g.mul_mat(w(il, "time_mix_value"), xv);
    if (!v_first) {
      v_first = v;
    } else {
      // v + (v_first - v) * sigmoid(vl + v0): one WKV7_VALUE_MIX node, rounded as the ADD, UNARY, SCALE, ADD,
      // MUL, ADD nodes.
      v = g.wkv7_value_mix(v, v_first, lora(xv, w(il, "time_mix_v1"), w(il, "time_mix_v2"), UnaryFn::Sigmoid, false),
                           w(il, "time_mix_v0"));
    }
    Tensor* gate = lora(xg, w(il, "time_mix_g1"), w(il, "time_mix_g2"), UnaryFn::Sigmoid, true);
    Tensor* al = lora(xa, w(il, "time_mix_a1"), w(il, "time_mix_a2"), UnaryFn::Sigmoid, false);
    // The decay w = exp(-0.606531 sigmoid(wl + w0)), a = sigmoid(al + a0), kk = L2-normed k * k_k per head,
    // k' = k + (a * ka - ka) with ka = k * k_a, and the recurrence's -kk and kk * a: one WKV7_INPUTS node
    // [C, T, 4] = (w, k', -kk, kk * a), rounded as the ADD, UNARY, SCALE, MUL and L2_NORM nodes it replaces.
    Tensor* ins = g.wkv7_inputs(k, wl, al, w(il, "time_mix_w0"), w(il, "time_mix_a0"), w(il, "time_mix_k_k"),
                                w(il, "time_mix_k_a"), S, 1e-12f);
    auto plane = [&](int i) {
      return g.view(ins, {S, H, T, 1}, {ins->nb[0], ins->nb[0] * uint64_t(S), ins->nb[1], ins->nb[2]},
                    uint64_t(i) * ins->nb[2]);
    };
    auto heads = [&](Tensor* x) { return g.reshape(x, {S, H, T, 1}); };
    Tensor* k3 = plane(1);
    Tensor* y =
        g.wkv7(heads(r), plane(0), k3, heads(v), plane(2), plane(3), c.in.wkv_state[size_t(il)], c.in.state_slots);
    g.named(y, fmt::format("blk.{}.wkv7", il));
    // Group norm: one group per head, its weight and bias [C] seen as [S, H] (one NORM node).
    auto per_head = [&](Tensor* p) { return g.reshape(p, {S, H, 1, 1}); };
    y = g.norm(g.reshape(y, {S, H, T, 1}), 64e-5f, per_head(w(il, "time_mix_ln")),
               per_head(w(il, "time_mix_ln", "bias")));
    // (y + v * sum_head((k * r) * r_k)) * g: one WKV7_OUTPUT node, rounded as the MUL, SUM_ROWS, ADD nodes.
    y = g.wkv7_output(g.reshape(y, {C, T, 1, 1}), r, g.reshape(k3, {C, T, 1, 1}), v, w(il, "time_mix_r_k"), gate, S);
    return g.named(g.mul_mat(w(il, "time_mix_output"), y), fmt::format("blk.{}.time_mix", il));
  }

  Tensor* channel_mix(int64_t il, Tensor* cur) {
    Tensor* prev = g.token_shift(cur, c.in.shift_ffn[size_t(il)], c.in.state_slots);
    Tensor* xk = g.lerp(cur, prev, w(il, "channel_mix_lerp_k"));
    Tensor* k = g.unary(g.mul_mat(w(il, "channel_mix_key"), xk), UnaryFn::ReluSqr);
    return g.named(g.mul_mat(w(il, "channel_mix_value"), k), fmt::format("blk.{}.channel_mix", il));
  }

  Tensor* build() {
    if (!c.in.state_slots || c.in.shift_att.size() != size_t(hp.n_layer) ||
        c.in.shift_ffn.size() != size_t(hp.n_layer) || c.in.wkv_state.size() != size_t(hp.n_layer))
      fail("{}: the graph inputs carry no recurrent state (the runtime must give RWKV-7 its per-layer states)",
           hp.arch);
    Tensor* x = g.named(g.get_rows(&m.require("token_embd.weight"), c.in.tokens), "embd");
    x = layer_norm(x, &m.require("token_embd_norm.weight"), &m.require("token_embd_norm.bias"));
    Tensor* v_first = nullptr;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      Tensor* att = layer_norm(x, w(il, "attn_norm"), w(il, "attn_norm", "bias"));
      Tensor* ffn_inp = g.add(time_mix(il, att, v_first), x);
      Tensor* ffn = layer_norm(ffn_inp, w(il, "attn_norm_2"), w(il, "attn_norm_2", "bias"));
      x = g.named(g.add(channel_mix(il, ffn), ffn_inp), fmt::format("blk.{}.out", il));
    }
    if (c.in.out_ids) x = g.get_rows(x, c.in.out_ids);
    x = layer_norm(x, &m.require("output_norm.weight"), &m.require("output_norm.bias"));
    if (c.hidden) return g.named(x, "result_norm");
    return g.named(g.mul_mat(&m.require("output.weight"), x), "logits");
  }
};

Tensor* build(BuildContext& c) {
  Builder b{c, c.g, c.model, c.hp, c.n_tokens};
  return b.build();
}

}  // namespace

Architecture rwkv7_architecture() {
  return {"rwkv7", {.output = OutputHead::Own, .block = BlockKind::Recurrent}, declare, build, read_hparams};
}

}  // namespace opal
