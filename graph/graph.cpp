#include "graph/graph.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "graph/op_info.h"

namespace opal {

const char* op_name(Op op) { return size_t(op) < size_t(Op::Count) ? op_info(op).name : "?"; }

std::array<uint64_t, kMaxDims> contiguous_strides(DType t, const std::array<int64_t, kMaxDims>& ne) {
  std::array<uint64_t, kMaxDims> nb{};
  nb[0] = uint64_t(type_size(t));
  nb[1] = row_bytes(t, ne[0]);
  for (int i = 2; i < kMaxDims; ++i) nb[i] = nb[i - 1] * uint64_t(ne[i - 1]);
  return nb;
}

uint64_t Tensor::nbytes() const {
  // bytes from the first to one past the last element
  uint64_t n = row_bytes(type, ne[0]);
  for (int i = 1; i < kMaxDims; ++i) n += uint64_t(ne[i] - 1) * nb[i];
  return n;
}

bool Tensor::is_contiguous() const { return nb == contiguous_strides(type, ne); }

const Tensor* Tensor::storage() const {
  const Tensor* t = this;
  while (t->op == Op::View || t->op == Op::KvStore) t = t->src[0];
  return t;
}
Tensor* Tensor::storage() { return const_cast<Tensor*>(static_cast<const Tensor*>(this)->storage()); }

std::string Tensor::shape_string() const {
  int n = kMaxDims;
  while (n > 1 && ne[n - 1] == 1) --n;
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

Tensor* Graph::new_leaf(std::string name, DType type, std::array<int64_t, kMaxDims> ne, TensorRole role) {
  Tensor& t = storage_.emplace_back();
  t.name = std::move(name);
  t.type = type;
  t.ne = ne;
  t.nb = contiguous_strides(type, ne);
  t.role = role;
  leaves_.push_back(&t);
  return &t;
}

Tensor* Graph::external(Tensor* t) {
  leaves_.push_back(t);
  return t;
}

Tensor* Graph::new_node(Op op, DType type, std::array<int64_t, kMaxDims> ne, std::initializer_list<Tensor*> srcs) {
  // The row's arity (graph/op_info.h): a builder passing other sources is a bug in this file.
  const OpInfo& info = op_info(op);
  const int n = int(srcs.size()), required = info.n_src - info.n_optional;
  if (n < required || n > info.n_src)
    fail("{}: {} sources given, the op takes {} to {}", info.name, n, required, info.n_src);
  int i = 0;
  for (Tensor* s : srcs) {
    if (!s && i < required) fail("{}: required source {} is null", info.name, i);
    ++i;
  }
  Tensor& t = storage_.emplace_back();
  t.op = op;
  t.type = type;
  t.ne = ne;
  t.nb = contiguous_strides(type, ne);
  t.role = TensorRole::Compute;
  i = 0;
  for (Tensor* s : srcs) t.src[i++] = s;
  t.name = fmt::format("{}#{}", info.name, nodes_.size());
  nodes_.push_back(&t);
  return &t;
}

Tensor* Graph::named(Tensor* t, std::string name) {
  t->name = std::move(name);
  return t;
}

namespace {
void require(bool ok, const char* op, const Tensor* a, const Tensor* b, const char* what) {
  if (!ok)
    fail("{}: {} ('{}' {} {}{}{})", op, what, a->name, a->shape_string(), dtype_name(a->type),
         b ? fmt::format(", '{}' {} ", b->name, b->shape_string()) : std::string(), b ? dtype_name(b->type) : "");
}
bool broadcastable(const Tensor* a, const Tensor* b) {
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] <= 0 || a->ne[i] % b->ne[i] != 0) return false;
  return true;
}
}  // namespace

Tensor* Graph::get_rows(Tensor* table, Tensor* ids) {
  require(ids->type == DType::I32, "GET_ROWS", table, ids, "ids must be i32");
  require(table->ne[2] == ids->ne[1] && table->ne[3] == 1 && ids->ne[2] == 1, "GET_ROWS", table, ids,
          "batch dims differ");
  return new_node(Op::GetRows, DType::F32, {table->ne[0], ids->ne[0], ids->ne[1], 1}, {table, ids});
}

Tensor* Graph::rms_norm(Tensor* x, float eps) {
  require(x->type == DType::F32, "RMS_NORM", x, nullptr, "input must be f32");
  Tensor* t = new_node(Op::RmsNorm, DType::F32, x->ne, {x});
  t->fparams[0] = eps;
  return t;
}

Tensor* Graph::mul(Tensor* a, Tensor* b) {
  require(broadcastable(a, b), "MUL", a, b, "shapes do not broadcast");
  return new_node(Op::Mul, DType::F32, a->ne, {a, b});
}
Tensor* Graph::add(Tensor* a, Tensor* b) {
  require(broadcastable(a, b), "ADD", a, b, "shapes do not broadcast");
  return new_node(Op::Add, DType::F32, a->ne, {a, b});
}
Tensor* Graph::div(Tensor* a, Tensor* b) {
  require(broadcastable(a, b), "DIV", a, b, "shapes do not broadcast");
  return new_node(Op::Div, DType::F32, a->ne, {a, b});
}
Tensor* Graph::scale(Tensor* a, float s) {
  Tensor* t = new_node(Op::Scale, DType::F32, a->ne, {a});
  t->fparams[0] = s;
  return t;
}
Tensor* Graph::sum_rows(Tensor* a) { return new_node(Op::SumRows, DType::F32, {1, a->ne[1], a->ne[2], a->ne[3]}, {a}); }

Tensor* Graph::mul_mat(Tensor* w, Tensor* x) {
  require(w->ne[0] == x->ne[0], "MUL_MAT", w, x, "inner dimensions differ");
  require(x->ne[2] % w->ne[2] == 0 && x->ne[3] % w->ne[3] == 0, "MUL_MAT", w, x, "batch dims do not broadcast");
  return new_node(Op::MulMat, DType::F32, {w->ne[1], x->ne[1], x->ne[2], x->ne[3]}, {w, x});
}

Tensor* Graph::mul_mat_id(Tensor* experts, Tensor* x, Tensor* ids) {
  require(experts->ne[0] == x->ne[0], "MUL_MAT_ID", experts, x, "inner dimensions differ");
  require(ids->type == DType::I32 && ids->ne[1] == x->ne[2], "MUL_MAT_ID", x, ids, "ids must be i32 [n_used, T]");
  require(x->ne[1] == 1 || x->ne[1] == ids->ne[0], "MUL_MAT_ID", x, ids, "x must have 1 or n_used columns");
  return new_node(Op::MulMatId, DType::F32, {experts->ne[1], ids->ne[0], ids->ne[1], 1}, {experts, x, ids});
}

Tensor* Graph::rope(Tensor* x, Tensor* pos, Tensor* freq_factors, int n_rot, RopeMode mode, float freq_base,
                    float freq_scale) {
  require(x->type == DType::F32 && pos->type == DType::I32 && pos->ne[0] == x->ne[2], "ROPE", x, pos,
          "needs f32 [D, H, T] and i32 positions [T]");
  require(n_rot > 0 && n_rot % 2 == 0 && n_rot <= x->ne[0], "ROPE", x, nullptr, "n_rot must be even and <= D");
  if (freq_factors)
    require(freq_factors->type == DType::F32 && freq_factors->ne[0] >= n_rot / 2, "ROPE", x, freq_factors,
            "freq factors must be f32 with n_rot/2 values");
  Tensor* t = new_node(Op::Rope, DType::F32, x->ne, {x, pos, freq_factors});
  t->iparams[0] = n_rot;
  t->iparams[1] = int32_t(mode);
  t->fparams[0] = freq_base;
  t->fparams[1] = freq_scale;
  return t;
}

Tensor* Graph::kv_store(Tensor* cache, Tensor* x, Tensor* cells) {
  require(cells->type == DType::I32 && x->type == DType::F32 && x->is_contiguous() &&
              cache->ne[0] * cells->ne[0] == x->n_elements(),
          "KV_STORE", cache, x, "needs contiguous f32 rows of the cache's width, one cell index per row");
  Tensor* t = new_node(Op::KvStore, cache->type, cache->ne, {cache, x, cells});
  t->nb = cache->nb;
  return t;
}

Tensor* Graph::attention(Tensor* q, Tensor* k, Tensor* v, Tensor* tokens, Tensor* cells, int n_head_kv, float scale,
                         int window, bool flash) {
  const int64_t dk = q->ne[0], hq = q->ne[1], T = q->ne[2];
  require(q->type == DType::F32 && q->is_contiguous(), "ATTENTION", q, nullptr, "q must be contiguous f32");
  require(n_head_kv > 0 && hq % n_head_kv == 0, "ATTENTION", q, nullptr, "n_head must be a multiple of n_head_kv");
  require(k->ne[0] == dk * n_head_kv, "ATTENTION", q, k, "k cache rows must be head_dim * n_head_kv");
  const int64_t v_cols = v->ne[0];
  require(v_cols % n_head_kv == 0 && v->ne[1] == k->ne[1], "ATTENTION", k, v, "v cache shape");
  require(tokens->type == DType::I32 && tokens->ne[0] == 2 && tokens->ne[1] == T, "ATTENTION", q, tokens,
          "token info must be i32 [2, T]");
  require(cells->type == DType::I32 && cells->ne[0] == 2 && cells->ne[1] == k->ne[1], "ATTENTION", k, cells,
          "cell info must be i32 [2, n_cells]");
  const int64_t dv = v_cols / n_head_kv;
  Tensor* t = new_node(Op::Attention, DType::F32, {dv * hq, T, 1, 1}, {q, k, v, tokens, cells});
  require(window >= 0, "ATTENTION", q, nullptr, "the sliding window must not be negative");
  t->iparams[0] = n_head_kv;
  t->iparams[1] = window;
  t->iparams[2] = flash ? 1 : 0;
  t->fparams[0] = scale;
  return t;
}

Tensor* Graph::swiglu(Tensor* gate, Tensor* up) {
  require(gate->ne == up->ne, "SWIGLU", gate, up, "shapes differ");
  return new_node(Op::Swiglu, DType::F32, gate->ne, {gate, up});
}
Tensor* Graph::silu(Tensor* x) { return new_node(Op::Silu, DType::F32, x->ne, {x}); }
Tensor* Graph::softmax(Tensor* x) { return new_node(Op::Softmax, DType::F32, x->ne, {x}); }
Tensor* Graph::top_k(Tensor* x, int k) {
  require(k > 0 && k <= x->ne[0], "TOP_K", x, nullptr, "k out of range");
  Tensor* t = new_node(Op::TopK, DType::I32, {k, x->ne[1], x->ne[2], x->ne[3]}, {x});
  t->iparams[0] = k;
  return t;
}
Tensor* Graph::cpy(Tensor* x, DType type) { return new_node(Op::Cpy, type, x->ne, {x}); }
Tensor* Graph::gelu(Tensor* x) { return new_node(Op::Gelu, DType::F32, x->ne, {x}); }
Tensor* Graph::geglu(Tensor* gate, Tensor* up) {
  require(gate->ne == up->ne, "GEGLU", gate, up, "shapes differ");
  return new_node(Op::Geglu, DType::F32, gate->ne, {gate, up});
}
Tensor* Graph::tanh(Tensor* x) { return unary(x, UnaryFn::Tanh); }

Tensor* Graph::softcap(Tensor* x, float cap) {
  require(x->type == DType::F32, "UNARY", x, nullptr, "input must be f32");
  require(cap > 0.0f && std::isfinite(cap), "UNARY", x, nullptr, "the soft-cap must be positive and finite");
  Tensor* t = new_node(Op::Unary, DType::F32, x->ne, {x});
  t->iparams[0] = int32_t(UnaryFn::SoftCap);
  t->fparams[0] = 1.0f / cap;
  t->fparams[1] = cap;
  return t;
}

const char* unary_fn_name(UnaryFn f) {
  switch (f) {
    case UnaryFn::Sigmoid: return "sigmoid";
    case UnaryFn::Tanh: return "tanh";
    case UnaryFn::Exp: return "exp";
    case UnaryFn::ReluSqr: return "relu_sqr";
    case UnaryFn::SoftCap: return "softcap";
  }
  return "?";
}

Tensor* Graph::norm(Tensor* x, float eps, Tensor* weight, Tensor* bias) {
  require(x->type == DType::F32, "NORM", x, nullptr, "input must be f32");
  for (Tensor* w : {weight, bias}) {
    if (!w) continue;
    require(w->type == DType::F32 && w->nb[0] == 4, "NORM", x, w, "weight and bias must be f32 rows");
    bool fits = w->ne[0] == x->ne[0];
    for (int d = 1; d < kMaxDims; ++d) fits = fits && w->ne[d] > 0 && x->ne[d] % w->ne[d] == 0;
    require(fits, "NORM", x, w, "weight and bias need x's row length and dims that divide x's");
  }
  Tensor* t = new_node(Op::Norm, DType::F32, x->ne, {x, weight, bias});
  t->fparams[0] = eps;
  return t;
}

Tensor* Graph::unary(Tensor* x, UnaryFn f) {
  require(x->type == DType::F32, "UNARY", x, nullptr, "input must be f32");
  require(int32_t(f) >= 0 && int32_t(f) <= int32_t(UnaryFn::ReluSqr), "UNARY", x, nullptr,
          "unknown function (the soft-cap is built with softcap())");
  Tensor* t = new_node(Op::Unary, DType::F32, x->ne, {x});
  t->iparams[0] = int32_t(f);
  return t;
}

Tensor* Graph::l2_norm(Tensor* x, float eps) {
  require(x->type == DType::F32, "L2_NORM", x, nullptr, "input must be f32");
  Tensor* t = new_node(Op::L2Norm, DType::F32, x->ne, {x});
  t->fparams[0] = eps;
  return t;
}

Tensor* Graph::token_shift(Tensor* x, Tensor* state, Tensor* slots) {
  require(x->type == DType::F32 && x->is_contiguous() && x->ne[2] == 1 && x->ne[3] == 1, "TOKEN_SHIFT", x, nullptr,
          "x must be contiguous f32 [C, T]");
  require(state->type == DType::F32 && state->ne[0] == x->ne[0] && state->is_contiguous() && state->ne[2] == 1,
          "TOKEN_SHIFT", x, state, "state must be contiguous f32 [C, n_slots]");
  require(slots->type == DType::I32 && slots->ne[0] == x->ne[1] && slots->n_elements() == x->ne[1], "TOKEN_SHIFT", x,
          slots, "needs one i32 slot per token");
  return new_node(Op::TokenShift, DType::F32, x->ne, {x, state, slots});
}

Tensor* Graph::wkv7(Tensor* r, Tensor* w, Tensor* k, Tensor* v, Tensor* a, Tensor* b, Tensor* state, Tensor* slots) {
  const int64_t S = r->ne[0], H = r->ne[1], T = r->ne[2];
  for (Tensor* x : {r, w, k, v, a, b})
    require(x->type == DType::F32 && x->is_contiguous() && x->ne == r->ne, "RWKV_WKV7", r, x,
            "r, w, k, v, a, b must be contiguous f32 of the same shape [S, H, T]");
  require(state->type == DType::F32 && state->is_contiguous() && state->ne[0] == S * S * H && state->ne[2] == 1,
          "RWKV_WKV7", r, state, "state must be contiguous f32 [S*S*H, n_slots]");
  require(slots->type == DType::I32 && slots->ne[0] == T && slots->n_elements() == T, "RWKV_WKV7", r, slots,
          "needs one i32 slot per token");
  return new_node(Op::Wkv7, DType::F32, {S * H, T, 1, 1}, {r, w, k, v, a, b, state, slots});
}

Tensor* Graph::lerp(Tensor* x, Tensor* p, Tensor* mix) {
  require(x->type == DType::F32 && x->is_contiguous() && x->ne[2] == 1 && x->ne[3] == 1, "LERP", x, nullptr,
          "x must be contiguous f32 [C, T]");
  require(p->type == DType::F32 && p->is_contiguous() && p->ne == x->ne, "LERP", x, p,
          "p must be contiguous f32 of x's shape [C, T]");
  require(mix->type == DType::F32 && mix->is_contiguous() && mix->ne[0] == x->ne[0], "LERP", x, mix,
          "mix must be contiguous f32 [C, n]");
  return new_node(Op::Lerp, DType::F32, {x->ne[0], x->ne[1], mix->n_elements() / mix->ne[0], 1}, {x, p, mix});
}

Tensor* Graph::wkv7_inputs(Tensor* k, Tensor* wl, Tensor* al, Tensor* w0, Tensor* a0, Tensor* k_k, Tensor* k_a,
                           int64_t S, float eps) {
  require(k->type == DType::F32 && k->is_contiguous() && k->ne[2] == 1 && k->ne[3] == 1, "WKV7_INPUTS", k, nullptr,
          "k must be contiguous f32 [C, T]");
  const int64_t C = k->ne[0];
  for (Tensor* x : {wl, al})
    require(x->type == DType::F32 && x->is_contiguous() && x->ne == k->ne, "WKV7_INPUTS", k, x,
            "the decay and ICLR LoRA outputs must be contiguous f32 of k's shape [C, T]");
  for (Tensor* x : {w0, a0, k_k, k_a})
    require(x->type == DType::F32 && x->is_contiguous() && x->n_elements() == C, "WKV7_INPUTS", k, x,
            "w0, a0, k_k and k_a must be contiguous f32 [C]");
  require(S > 0 && C % S == 0, "WKV7_INPUTS", k, nullptr, "the head size must be positive and divide C");
  Tensor* t = new_node(Op::Wkv7Inputs, DType::F32, {C, k->ne[1], 4, 1}, {k, wl, al, w0, a0, k_k, k_a});
  t->iparams[0] = int32_t(S);
  t->fparams[0] = eps;
  return t;
}

Tensor* Graph::wkv7_output(Tensor* y, Tensor* r, Tensor* k, Tensor* v, Tensor* r_k, Tensor* gate, int64_t S) {
  require(y->type == DType::F32 && y->is_contiguous() && y->ne[2] == 1 && y->ne[3] == 1, "WKV7_OUTPUT", y, nullptr,
          "y must be contiguous f32 [C, T]");
  const int64_t C = y->ne[0];
  for (Tensor* x : {r, k, v, gate})
    require(x->type == DType::F32 && x->is_contiguous() && x->ne == y->ne, "WKV7_OUTPUT", y, x,
            "r, k, v and gate must be contiguous f32 of y's shape [C, T]");
  require(r_k->type == DType::F32 && r_k->is_contiguous() && r_k->n_elements() == C, "WKV7_OUTPUT", y, r_k,
          "r_k must be contiguous f32 [C]");
  require(S > 0 && C % S == 0, "WKV7_OUTPUT", y, nullptr, "the head size must be positive and divide C");
  Tensor* t = new_node(Op::Wkv7Output, DType::F32, y->ne, {y, r, k, v, r_k, gate});
  t->iparams[0] = int32_t(S);
  return t;
}

Tensor* Graph::wkv7_value_mix(Tensor* v, Tensor* v_first, Tensor* vl, Tensor* v0) {
  require(v->type == DType::F32 && v->is_contiguous() && v->ne[2] == 1 && v->ne[3] == 1, "WKV7_VALUE_MIX", v, nullptr,
          "v must be contiguous f32 [C, T]");
  for (Tensor* x : {v_first, vl})
    require(x->type == DType::F32 && x->is_contiguous() && x->ne == v->ne, "WKV7_VALUE_MIX", v, x,
            "v_first and the value LoRA's output must be contiguous f32 of v's shape [C, T]");
  require(v0->type == DType::F32 && v0->is_contiguous() && v0->n_elements() == v->ne[0], "WKV7_VALUE_MIX", v, v0,
          "v0 must be contiguous f32 [C]");
  return new_node(Op::Wkv7ValueMix, DType::F32, v->ne, {v, v_first, vl, v0});
}

Tensor* Graph::reshape(Tensor* x, std::array<int64_t, kMaxDims> ne) {
  require(x->is_contiguous(), "RESHAPE", x, nullptr, "source must be contiguous");
  const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
  require(n == x->n_elements(), "RESHAPE", x, nullptr, "element counts differ");
  Tensor* t = new_node(Op::View, x->type, ne, {x});
  return t;
}

Tensor* Graph::view(Tensor* x, std::array<int64_t, kMaxDims> ne, std::array<uint64_t, kMaxDims> nb, uint64_t offset) {
  Tensor* t = new_node(Op::View, x->type, ne, {x});
  t->nb = nb;
  t->view_offset = offset;
  require(offset + t->nbytes() <= x->nbytes(), "VIEW", x, nullptr, "view runs past its source");
  return t;
}

}  // namespace opal
