// The ops RWKV-7 brought (issue 17), on f32 rows:
//   NORM         layer norm, as ggml_norm: mean and variance summed in
//                double (in 8 lanes, sum8 below), y = (x - mean) *
//                1/sqrtf(var + eps); with a weight and/or bias (the MUL and
//                ADD nodes of a LayerNorm or GroupNorm, fused) then y * w,
//                then + b, each in its own pass over the row (the row is in
//                L1), so neither is contracted into a fused multiply-add on a
//                target that has one: the same bits as the three nodes;
//   L2_NORM      as ggml_l2_norm: sum of squares in double,
//                y = x * 1/max(sqrtf(sum), eps);
//   UNARY        sigmoid 1/(1+exp(-x)) and exp through ggml_v_expf's
//                polynomial (kernels/rwkv_kernels.h: about 1 ulp from the C
//                library's expf, which llama.cpp calls per element; the same
//                bits on every ISA), tanhf (the C library's, as llama.cpp:
//                Gemma's soft-cap stays bit-identical), relu(x)^2 (ggml_relu then ggml_sqr),
//                softcap tanhf(x * (1/cap)) * cap (Gemma's SCALE, tanh, SCALE in one pass,
//                rounded as the three); on contiguous tensors threads split the elements;
//   TOKEN_SHIFT  y[:, t] = x of the previous token of the same state slot, or
//                the slot's state column for a slot's first token; then each
//                slot's column = x of its last token. Threads split the
//                channels, so each reads and writes only its own part of the state;
//   RWKV_WKV7    the RWKV-7 recurrence (graph/graph.h, Wkv7Src), per head a
//                row-major S x S state per slot, updated in place token after
//                token. Threads split the heads. When S is a multiple of 16 the
//                sums over the key index j run in 16 lanes (lane l takes
//                j = l mod 16), then pairwise, as ggml's SIMD path groups them,
//                with the fused multiply-adds of kernels/rwkv_kernels.h (the
//                AVX2 / AVX-512 kernels there, else its scalar form: the same
//                bits on every ISA and with any compiler contraction).
//   LERP         y[:, t, i] = ((p - x) * mix_i) + x for the n mixes of one
//                token at once (x and p read once), a multiply and an add
//                rounded apart as the SUB/MUL/ADD nodes it replaces
//                (kernels/rwkv_kernels.h). Threads split the tokens.
//   WKV7_INPUTS  the chain from the projections to the recurrence (graph/graph.h,
//                Wkv7InputsSrc) one token at a time: each of the four output
//                rows of the token is built in place in L1 (decay: add, sigmoid,
//                scale, exp; a: add, sigmoid in the kk * a row until its last
//                pass; kk: multiply, then L2_NORM's per-head sum in double),
//                every operation rounded as the node it replaces (sigmoid and
//                exp through the same kernels as UNARY, the arithmetic built
//                without contraction). Threads split the tokens.
//   WKV7_OUTPUT  per token and head: rk = the sum of (k * r) * r_k in double in
//                order (as SUM_ROWS), then (y + (v * rk)) * gate, built without
//                contraction. Threads split the tokens.
//   WKV7_VALUE_MIX  per token: m = sigmoid(vl + v0) (the add, then UNARY's
//                sigmoid on the row), then v + ((v_first + (v * -1)) * m),
//                each operation rounded apart (built without contraction), as
//                the ADD, UNARY, SCALE, ADD, MUL, ADD nodes it replaces.
//                Threads split the tokens.
// Rows, threads: NORM / L2_NORM (and UNARY on strided tensors) split the rows of the output.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/rwkv_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

// The sum of f(x[i]) in double, in 8 lanes (lane l takes i = l mod 8, in
// order), then (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)), then the tail
// of n % 8 in order. The lanes break the one long chain of dependent adds
// (the compiler vectorizes them); the order is fixed, so every ISA gives the
// same bits. NORM's mean and variance, within an ulp or so of the sequential
// double sum they replaced (the tiny-rwkv7 goldens did not move).
template <typename F>
double sum8(const float* x, int64_t n, F f) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(x[i + l]);
  double sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += f(x[i]);
  return sum;
}

// NORM's optional weight (src1) or bias (src2) row for output row r,
// broadcast as MUL / ADD broadcast (row_iter.h); null when absent.
const float* norm_affine_row(const Tensor& node, int src, int64_t r) {
  const Tensor* w = node.src[src];
  if (!w) return nullptr;
  const int64_t i1 = r % node.ne[1], i2 = (r / node.ne[1]) % node.ne[2], i3 = r / (node.ne[1] * node.ne[2]);
  return reinterpret_cast<const float*>(row_ptr(*w, i1 % w->ne[1], i2 % w->ne[2], i3 % w->ne[3]));
}

// UNARY on n consecutive elements (the function is element-wise, so any split gives the same bits).
void unary_span(const Tensor& node, UnaryFn fn, const float* x, float* y, int64_t n, const RwkvKernels* kern) {
  switch (fn) {
    case UnaryFn::Sigmoid:
      if (kern) {
        kern->sigmoid_row(x, y, n);
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = rwkv_ref::sigmoid1(x[i]);
      }
      break;
    case UnaryFn::Tanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
    case UnaryFn::Exp:
      if (kern) {
        kern->exp_row(x, y, n);
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = rwkv_ref::exp1(x[i]);
      }
      break;
    case UnaryFn::ReluSqr:
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = v * v;
      }
      break;
    case UnaryFn::SoftCap: {  // the SCALE, tanh, SCALE chain: each product rounded on its own
      const float inv = node.fparams[0], cap = node.fparams[1];
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i] * inv) * cap;
      break;
    }
  }
}

void rows_op(const Tensor& node, const OpContext& ctx) {
  if (node.op == Op::Unary && node.src[0]->is_contiguous() && node.is_contiguous()) {
    // Element-wise: threads split the elements (in blocks of 64), so that one long row (Gemma's
    // soft-capped logits of a decode step, 262144 of them) runs on every thread.
    const float* x = static_cast<const float*>(node.src[0]->data);
    float* y = static_cast<float*>(node.data);
    const int64_t n = node.n_elements(), blocks = (n + 63) / 64;
    const UnaryFn fn = UnaryFn(node.iparams[0]);
    const RwkvKernels* kern = rwkv_kernels();
    run_rows(ctx, n, [&](int ith, int nth) {
      int64_t b0, b1;
      split_range(blocks, ith, nth, &b0, &b1);
      const int64_t i0 = b0 * 64, i1 = std::min(n, b1 * 64);
      if (i0 < i1) unary_span(node, fn, x + i0, y + i0, i1 - i0, kern);
    });
    return;
  }
  const Tensor& a = *node.src[0];
  const int64_t n = a.ne[0];
  const float eps = node.fparams[0];
  const UnaryFn fn = UnaryFn(node.iparams[0]);
  const RwkvKernels* kern = rwkv_kernels();
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t r0, r1;
    split_range(node.n_rows(), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = reinterpret_cast<const float*>(row_ptr_flat(a, r));
      float* y = reinterpret_cast<float*>(row_ptr_flat(node, r));
      switch (node.op) {
        case Op::Norm: {
          const float mean = float(sum8(x, n, [](float v) { return double(v); }) / double(n));
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mean;
          const float var = float(sum8(y, n, [](float d) { return double(d * d); }) / double(n));
          const float s = 1.0f / std::sqrt(var + eps);
          for (int64_t i = 0; i < n; ++i) y[i] *= s;
          if (const float* w = norm_affine_row(node, 1, r))
            for (int64_t i = 0; i < n; ++i) y[i] *= w[i];
          if (const float* b = norm_affine_row(node, 2, r))
            for (int64_t i = 0; i < n; ++i) y[i] += b[i];
          break;
        }
        case Op::L2Norm: {
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
          const float s = 1.0f / std::max(std::sqrt(float(sum)), eps);
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
          break;
        }
        case Op::Unary: unary_span(node, fn, x, y, n, kern); break;
        default: break;
      }
    }
  });
}

}  // namespace

void compute_rwkv_rows(const Tensor& node, const OpContext& ctx) { rows_op(node, ctx); }

void compute_token_shift(const Tensor& node, const OpContext& ctx) {
  const Tensor& x = *node.src[0];
  const Tensor& state = *node.src[1];
  const int32_t* slot = static_cast<const int32_t*>(node.src[2]->data);
  const int64_t C = x.ne[0], T = x.ne[1];
  const float* px = static_cast<const float*>(x.data);
  float* ps = static_cast<float*>(state.data);
  float* py = static_cast<float*>(node.data);
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t c0, c1;
    split_range(C, ith, nth, &c0, &c1);
    if (c0 >= c1) return;
    for (int64_t t = 0; t < T; ++t) {
      int64_t prev = t - 1;
      while (prev >= 0 && slot[prev] != slot[t]) --prev;
      const float* src = prev >= 0 ? px + prev * C : ps + int64_t(slot[t]) * C;
      std::copy(src + c0, src + c1, py + t * C + c0);
    }
    for (int64_t t = 0; t < T; ++t) {  // the last token of each slot becomes its state
      int64_t later = t + 1;
      while (later < T && slot[later] != slot[t]) ++later;
      if (later < T) continue;
      std::copy(px + t * C + c0, px + t * C + c1, ps + int64_t(slot[t]) * C + c0);
    }
  });
}

void compute_lerp(const Tensor& node, const OpContext& ctx) {
  const Tensor& x = *node.src[0];
  const int64_t C = x.ne[0], T = x.ne[1], n_mix = node.ne[2];
  const float* px = static_cast<const float*>(x.data);
  const float* pp = static_cast<const float*>(node.src[1]->data);
  const float* mix = static_cast<const float*>(node.src[2]->data);
  float* py = static_cast<float*>(node.data);
  const RwkvKernels* kern = rwkv_kernels();
  const auto lerp = kern ? kern->lerp : rwkv_ref::lerp;
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) lerp(px + t * C, pp + t * C, mix, n_mix, py + t * C, T * C, C);
  });
}

namespace {

// One token of WKV7_INPUTS (graph/graph.h): k, wl, al rows of C; w0, a0, kk_w (k_k), ka_w (k_a) the
// per-channel vectors; out rows of C at out + i * stride (w, k', -kk, kk * a). Built without
// floating-point contraction: (a * ka) + (ka * -1) must round twice, as the MUL, SCALE and ADD nodes.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void wkv7_inputs_token(const float* k, const float* wl, const float* al, const float* w0, const float* a0,
                       const float* kk_w, const float* ka_w, float* out, int64_t stride, int64_t C, int64_t S,
                       float eps, const RwkvKernels* kern) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  float* __restrict ow = out;
  float* __restrict ok = out + stride;
  float* __restrict onk = out + 2 * stride;
  float* __restrict okka = out + 3 * stride;
  // The decay: exp(sigmoid(wl + w0) * -0.606531).
  for (int64_t j = 0; j < C; ++j) ow[j] = wl[j] + w0[j];
  if (kern) {
    kern->sigmoid_row(ow, ow, C);
  } else {
    for (int64_t j = 0; j < C; ++j) ow[j] = rwkv_ref::sigmoid1(ow[j]);
  }
  for (int64_t j = 0; j < C; ++j) ow[j] = ow[j] * -0.606531f;
  if (kern) {
    kern->exp_row(ow, ow, C);
  } else {
    for (int64_t j = 0; j < C; ++j) ow[j] = rwkv_ref::exp1(ow[j]);
  }
  // a = sigmoid(al + a0), held in the last row for now.
  for (int64_t j = 0; j < C; ++j) okka[j] = al[j] + a0[j];
  if (kern) {
    kern->sigmoid_row(okka, okka, C);
  } else {
    for (int64_t j = 0; j < C; ++j) okka[j] = rwkv_ref::sigmoid1(okka[j]);
  }
  // kk = L2_NORM per head of k * k_k, as L2_NORM rounds it.
  for (int64_t j = 0; j < C; ++j) onk[j] = k[j] * kk_w[j];
  for (int64_t h = 0; h < C; h += S) {
    double sum = 0.0;
    for (int64_t j = h; j < h + S; ++j) sum += double(onk[j] * onk[j]);
    const float s = 1.0f / std::max(std::sqrt(float(sum)), eps);
    for (int64_t j = h; j < h + S; ++j) onk[j] = onk[j] * s;
  }
  for (int64_t j = 0; j < C; ++j) {
    const float a = okka[j], kk = onk[j];
    const float ka = k[j] * ka_w[j];
    const float aka = a * ka;
    const float t = aka + ka * -1.0f;
    ok[j] = k[j] + t;
    okka[j] = kk * a;
    onk[j] = kk * -1.0f;
  }
}

// One token of WKV7_OUTPUT (graph/graph.h); without contraction: y + (v * rk) must round twice.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void wkv7_output_token(const float* y, const float* r, const float* k, const float* v, const float* r_k,
                       const float* gate, float* out, int64_t C, int64_t S) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  for (int64_t h = 0; h < C; h += S) {
    double sum = 0.0;
    for (int64_t j = h; j < h + S; ++j) {
      const float kr = k[j] * r[j];
      sum += double(kr * r_k[j]);
    }
    const float rk = float(sum);
    for (int64_t j = h; j < h + S; ++j) {
      const float vr = v[j] * rk;
      const float s = y[j] + vr;
      out[j] = s * gate[j];
    }
  }
}

// One token of WKV7_VALUE_MIX (graph/graph.h) into out (which holds the mix
// until the last pass); without contraction: every operation rounds apart.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void wkv7_value_mix_token(const float* v, const float* v_first, const float* vl, const float* v0, float* out,
                          int64_t C, const RwkvKernels* kern) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  for (int64_t j = 0; j < C; ++j) out[j] = vl[j] + v0[j];
  if (kern) {
    kern->sigmoid_row(out, out, C);
  } else {
    for (int64_t j = 0; j < C; ++j) out[j] = rwkv_ref::sigmoid1(out[j]);
  }
  for (int64_t j = 0; j < C; ++j) {
    const float neg = v[j] * -1.0f;
    const float d = v_first[j] + neg;
    const float m = d * out[j];
    out[j] = v[j] + m;
  }
}

}  // namespace

void compute_wkv7_value_mix(const Tensor& node, const OpContext& ctx) {
  const int64_t C = node.ne[0], T = node.n_elements() / C;
  auto f = [&](int i) { return static_cast<const float*>(node.src[i]->data); };
  const float *v = f(0), *v_first = f(1), *vl = f(2), *v0 = f(3);
  float* out = static_cast<float*>(node.data);
  const RwkvKernels* kern = rwkv_kernels();
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t * C;
      wkv7_value_mix_token(v + o, v_first + o, vl + o, v0, out + o, C, kern);
    }
  });
}

void compute_wkv7_output(const Tensor& node, const OpContext& ctx) {
  const int64_t C = node.ne[0], T = node.ne[1], S = node.iparams[0];
  auto f = [&](int i) { return static_cast<const float*>(node.src[i]->data); };
  const float *y = f(0), *r = f(1), *k = f(2), *v = f(3), *r_k = f(4), *gate = f(5);
  float* out = static_cast<float*>(node.data);
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t * C;
      wkv7_output_token(y + o, r + o, k + o, v + o, r_k, gate + o, out + o, C, S);
    }
  });
}

void compute_wkv7_inputs(const Tensor& node, const OpContext& ctx) {
  const Tensor& kt = *node.src[kWinK];
  const int64_t C = kt.ne[0], T = kt.ne[1], S = node.iparams[0];
  auto f = [&](int i) { return static_cast<const float*>(node.src[i]->data); };
  const float *k = f(kWinK), *wl = f(kWinWl), *al = f(kWinAl), *w0 = f(kWinW0), *a0 = f(kWinA0), *kk_w = f(kWinKk),
              *ka_w = f(kWinKa);
  float* y = static_cast<float*>(node.data);
  const float eps = node.fparams[0];
  const RwkvKernels* kern = rwkv_kernels();
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t)
      wkv7_inputs_token(k + t * C, wl + t * C, al + t * C, w0, a0, kk_w, ka_w, y + t * C, T * C, C, S, eps, kern);
  });
}

void compute_wkv7(const Tensor& node, const OpContext& ctx) {
  const Tensor& rt = *node.src[kWkvR];
  const int64_t S = rt.ne[0], H = rt.ne[1], T = rt.ne[2];
  const float* r = static_cast<const float*>(rt.data);
  const float* w = static_cast<const float*>(node.src[kWkvW]->data);
  const float* k = static_cast<const float*>(node.src[kWkvK]->data);
  const float* v = static_cast<const float*>(node.src[kWkvV]->data);
  const float* a = static_cast<const float*>(node.src[kWkvA]->data);
  const float* b = static_cast<const float*>(node.src[kWkvB]->data);
  float* state = static_cast<float*>(node.src[kWkvState]->data);
  const int32_t* slot = static_cast<const int32_t*>(node.src[kWkvSlot]->data);
  float* y = static_cast<float*>(node.data);
  const int64_t slot_stride = S * S * H;
  const RwkvKernels* kern = rwkv_kernels();
  ctx.pool.run([&](int ith, int nth) {
    int64_t h0, h1;
    split_range(H, ith, nth, &h0, &h1);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t off = (t * H + h) * S;
        const float* __restrict rr = r + off;
        const float* __restrict ww = w + off;
        const float* __restrict kk = k + off;
        const float* __restrict vv = v + off;
        const float* __restrict aa = a + off;
        const float* __restrict bb = b + off;
        float* __restrict st = state + int64_t(slot[t]) * slot_stride + h * S * S;
        float* __restrict out = y + off;
        if (S % 16 == 0) {
          (kern ? kern->wkv7_head : rwkv_ref::wkv7_head)(st, rr, ww, kk, vv, aa, bb, out, S);
          continue;
        }
        for (int64_t i = 0; i < S; ++i) {  // other head sizes: plain sums in key order
          float* __restrict row = st + i * S;
          const float vi = vv[i];
          float sa = 0.0f;
          for (int64_t j = 0; j < S; ++j) sa = std::fma(aa[j], row[j], sa);
          float acc = 0.0f;
          for (int64_t j = 0; j < S; ++j) {
            const float s = std::fma(sa, bb[j], std::fma(vi, kk[j], row[j] * ww[j]));
            row[j] = s;
            acc = std::fma(s, rr[j], acc);
          }
          out[i] = acc;
        }
      }
    }
  });
}

}  // namespace opal::cpu
