// The ops RWKV-7 brought (NORM with and without weight and bias, L2_NORM, UNARY, TOKEN_SHIFT, RWKV_WKV7, LERP,
// WKV7_INPUTS, WKV7_OUTPUT, WKV7_VALUE_MIX)
// against straightforward double-precision math on random inputs, run through
// the scheduler like a model graph (1 and 3 threads), with several sequences
// (state slots) interleaved in one batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "graph/registry.h"
#include "graph/scheduler.h"

namespace opal {
namespace {

struct Harness {
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  std::mt19937 rng{7};
  explicit Harness(int threads) : reg(make_registry({}, threads)) {}
  Tensor* input(DType t, std::array<int64_t, 4> ne, const std::string& name) {
    return g->new_leaf(name, t, ne, TensorRole::Input);
  }
  std::unique_ptr<ScheduledGraph> schedule(std::vector<Tensor*> outs) {
    for (Tensor* o : outs) g->mark_output(o);
    return Scheduler(*reg).schedule(std::move(g));
  }
  void fill(Tensor* t, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t->n_elements(); ++i) t->ptr<float>()[i] = d(rng);
  }
};

class RwkvOps : public ::testing::TestWithParam<int> {};

TEST_P(RwkvOps, NormL2NormUnary) {
  Harness h(GetParam());
  const int64_t n = 67, rows = 7;  // 67: NORM's 8-lane sums and their tail
  Tensor* x = h.input(DType::F32, {n, rows, 1, 1}, "x");
  Tensor* ln = h.g->norm(x, 1e-5f);
  Tensor* l2 = h.g->l2_norm(x, 1e-12f);
  std::vector<Tensor*> un;
  for (int f = 0; f <= int(UnaryFn::ReluSqr); ++f) un.push_back(h.g->unary(x, UnaryFn(f)));
  std::vector<Tensor*> outs = {ln, l2};
  outs.insert(outs.end(), un.begin(), un.end());
  auto sg = h.schedule(outs);
  h.fill(x, -3, 4);
  std::fill(x->ptr<float>() + n, x->ptr<float>() + 2 * n, 0.0f);  // a zero row: L2 norm divides by eps
  sg->run();
  const float* px = x->ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) mean += px[r * n + i];
    mean /= double(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      var += (px[r * n + i] - mean) * (px[r * n + i] - mean);
      ss += double(px[r * n + i]) * px[r * n + i];
    }
    var /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = px[r * n + i];
      EXPECT_NEAR(ln->ptr<float>()[r * n + i], (v - mean) / std::sqrt(var + 1e-5), 2e-5);
      EXPECT_NEAR(l2->ptr<float>()[r * n + i], v / std::max(std::sqrt(ss), 1e-12), 1e-6);
      EXPECT_NEAR(un[0]->ptr<float>()[r * n + i], 1.0 / (1.0 + std::exp(-v)), 1e-6);
      EXPECT_NEAR(un[1]->ptr<float>()[r * n + i], std::tanh(v), 1e-6);
      EXPECT_NEAR(un[2]->ptr<float>()[r * n + i], std::exp(v), 1e-6 * std::exp(v));
      EXPECT_NEAR(un[3]->ptr<float>()[r * n + i], v > 0 ? v * v : 0.0, 1e-5);
    }
  }
}

TEST_P(RwkvOps, TokenShiftInterleavedSequences) {
  Harness h(GetParam());
  const int64_t C = 37, T = 6, slots_n = 3;
  Tensor* x = h.input(DType::F32, {C, T, 1, 1}, "x");
  Tensor* state = h.input(DType::F32, {C, slots_n, 1, 1}, "state");
  Tensor* slots = h.input(DType::I32, {T, 1, 1, 1}, "slots");
  Tensor* y = h.g->token_shift(x, state, slots);
  auto sg = h.schedule({y});
  h.fill(x);
  h.fill(state);
  const int32_t sl[T] = {0, 1, 0, 2, 1, 0};
  std::memcpy(slots->data, sl, sizeof sl);
  const std::vector<float> s0(state->ptr<float>(), state->ptr<float>() + C * slots_n);
  sg->run();
  const float* px = x->ptr<float>();
  const int prev[T] = {-1, -1, 0, -1, 1, 2};  // previous token of the same slot
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      const float want = prev[t] >= 0 ? px[prev[t] * C + c] : s0[size_t(sl[t] * C + c)];
      ASSERT_EQ(y->ptr<float>()[t * C + c], want) << t << " " << c;
    }
  const int last[slots_n] = {5, 4, 3};  // the last token of each slot becomes its state
  for (int64_t s = 0; s < slots_n; ++s)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(state->ptr<float>()[s * C + c], px[last[s] * C + c]);
}

// LERP against double math, and bit for bit against the SUB, MUL, ADD chain it replaces in the model
// (C = 37: SIMD blocks plus a tail; the six mixes of a time mix).
TEST_P(RwkvOps, LerpMatchesDoubleMathAndTheUnfusedChain) {
  Harness h(GetParam());
  const int64_t C = 37, T = 5, N = 6;
  Tensor* x = h.input(DType::F32, {C, T, 1, 1}, "x");
  Tensor* p = h.input(DType::F32, {C, T, 1, 1}, "p");
  Tensor* mix = h.input(DType::F32, {C, 1, 1, N}, "mix");
  Tensor* y = h.g->lerp(x, p, mix);
  ASSERT_EQ(y->ne, (std::array<int64_t, 4>{C, T, N, 1}));
  Tensor* d = h.g->add(p, h.g->scale(x, -1.0f));
  std::vector<Tensor*> outs = {y};
  for (int64_t i = 0; i < N; ++i) {
    Tensor* mi = h.g->view(mix, {C, 1, 1, 1}, mix->nb, uint64_t(i) * mix->nb[3]);
    outs.push_back(h.g->add(h.g->mul(d, mi), x));
  }
  auto sg = h.schedule(outs);
  h.fill(x, -3, 3);
  h.fill(p, -3, 3);
  h.fill(mix, 0, 1);
  sg->run();
  const float *px = x->ptr<float>(), *pp = p->ptr<float>(), *pm = mix->ptr<float>(), *py = y->ptr<float>();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double want = (double(pp[t * C + c]) - px[t * C + c]) * pm[i * C + c] + px[t * C + c];
        const float got = py[(i * T + t) * C + c];
        ASSERT_NEAR(got, want, 4e-7 * (std::abs(want) + 3.0)) << i << " " << t << " " << c;
        ASSERT_EQ(got, outs[size_t(i + 1)]->ptr<float>()[t * C + c]) << "mix " << i << " token " << t << " ch " << c;
      }
}

// NORM with weight and bias (the fused LayerNorm / GroupNorm) against double math, and bit for bit against the
// NORM, MUL, ADD chain it replaces; the GroupNorm form with a [S, H] weight broadcast over tokens (S = 67: the
// 8-lane sums and their tail; H = 3 heads, T = 4 tokens), and a weight without a bias.
TEST_P(RwkvOps, NormWeightBiasMatchesDoubleMathAndTheUnfusedChain) {
  Harness h(GetParam());
  const int64_t S = 67, H = 3, T = 4;
  Tensor* x = h.input(DType::F32, {S, H, T, 1}, "x");
  Tensor* w = h.input(DType::F32, {S, H, 1, 1}, "w");
  Tensor* b = h.input(DType::F32, {S, H, 1, 1}, "b");
  Tensor* y = h.g->norm(x, 64e-5f, w, b);
  Tensor* yw = h.g->norm(x, 64e-5f, w);
  Tensor* chain = h.g->add(h.g->mul(h.g->norm(x, 64e-5f), w), b);
  auto sg = h.schedule({y, yw, chain});
  h.fill(x, -3, 4);
  h.fill(w, -2, 2);
  h.fill(b, -1, 1);
  sg->run();
  const float *px = x->ptr<float>(), *pw = w->ptr<float>(), *pb = b->ptr<float>();
  for (int64_t r = 0; r < H * T; ++r) {
    const float* xr = px + r * S;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < S; ++i) mean += xr[i];
    mean /= double(S);
    for (int64_t i = 0; i < S; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(S);
    const int64_t head = r % H;
    for (int64_t i = 0; i < S; ++i) {
      const double nrm = (xr[i] - mean) / std::sqrt(var + 64e-5);
      const double ww = pw[head * S + i], bb = pb[head * S + i];
      const int64_t at = r * S + i;
      ASSERT_NEAR(y->ptr<float>()[at], nrm * ww + bb, 4e-5) << r << " " << i;
      ASSERT_NEAR(yw->ptr<float>()[at], nrm * ww, 4e-5) << r << " " << i;
      ASSERT_EQ(y->ptr<float>()[at], chain->ptr<float>()[at]) << "row " << r << " element " << i;
    }
  }
}

// NORM's weight and bias must fit x: f32, its row length, dims that divide x's.
TEST(RwkvOpsShapes, NormWeightBiasShapesAreChecked) {
  Graph g;
  Tensor* x = g.new_leaf("x", DType::F32, {64, 12, 5, 1}, TensorRole::Input);
  EXPECT_NO_THROW(g.norm(x, 1e-5f, g.new_leaf("w", DType::F32, {64, 12, 1, 1}, TensorRole::Input)));
  EXPECT_THROW(g.norm(x, 1e-5f, g.new_leaf("w2", DType::F32, {32, 12, 1, 1}, TensorRole::Input)), Error);
  EXPECT_THROW(g.norm(x, 1e-5f, nullptr, g.new_leaf("b2", DType::F32, {64, 5, 1, 1}, TensorRole::Input)), Error);
  EXPECT_THROW(g.norm(x, 1e-5f, g.new_leaf("w3", DType::F16, {64, 1, 1, 1}, TensorRole::Input)), Error);
}

// WKV7_INPUTS against double math, and bit for bit against the 15 nodes it replaces in the model (heads of
// S = 20: SIMD blocks of 16 plus a tail in each head; C = 60).
TEST_P(RwkvOps, Wkv7InputsMatchDoubleMathAndTheUnfusedChain) {
  Harness h(GetParam());
  const int64_t S = 20, H = 3, C = S * H, T = 5;
  Graph& g = *h.g;
  Tensor* k = h.input(DType::F32, {C, T, 1, 1}, "k");
  Tensor* wl = h.input(DType::F32, {C, T, 1, 1}, "wl");
  Tensor* al = h.input(DType::F32, {C, T, 1, 1}, "al");
  Tensor* w0 = h.input(DType::F32, {C, 1, 1, 1}, "w0");
  Tensor* a0 = h.input(DType::F32, {C, 1, 1, 1}, "a0");
  Tensor* k_k = h.input(DType::F32, {C, 1, 1, 1}, "k_k");
  Tensor* k_a = h.input(DType::F32, {C, 1, 1, 1}, "k_a");
  Tensor* y = g.wkv7_inputs(k, wl, al, w0, a0, k_k, k_a, S, 1e-12f);
  ASSERT_EQ(y->ne, (std::array<int64_t, 4>{C, T, 4, 1}));
  // The chain as models/rwkv7.cpp built it before the fusion.
  auto sub = [&](Tensor* x, Tensor* z) { return g.add(x, g.scale(z, -1.0f)); };
  Tensor* dw = g.unary(g.scale(g.unary(g.add(wl, w0), UnaryFn::Sigmoid), -0.606531f), UnaryFn::Exp);
  Tensor* a = g.unary(g.add(al, a0), UnaryFn::Sigmoid);
  Tensor* kk = g.l2_norm(g.reshape(g.mul(k, k_k), {S, H, T, 1}), 1e-12f);
  Tensor* ka = g.mul(k, k_a);
  Tensor* k2 = g.add(k, sub(g.mul(a, ka), ka));
  Tensor* nkk = g.scale(kk, -1.0f);
  Tensor* kka = g.mul(kk, g.reshape(a, {S, H, T, 1}));
  const std::vector<Tensor*> chain = {dw, k2, nkk, kka};
  std::vector<Tensor*> outs = {y};
  outs.insert(outs.end(), chain.begin(), chain.end());
  auto sg = h.schedule(outs);
  h.fill(k, -2, 2);
  h.fill(wl, -3, 3);
  h.fill(al, -3, 3);
  h.fill(w0, -3, 1);
  h.fill(a0, -1, 1);
  h.fill(k_k, 0, 1.5f);
  h.fill(k_a, 0, 1.5f);
  std::fill(k->ptr<float>() + C, k->ptr<float>() + C + S, 0.0f);  // token 1's first head is zero: kk divides by eps
  sg->run();
  auto at = [](Tensor* t, int64_t i) { return double(t->ptr<float>()[i]); };
  for (int64_t t = 0; t < T; ++t) {
    double want[4][C] = {};
    for (int64_t hd = 0; hd < H; ++hd) {
      double ss = 0;
      for (int64_t j = hd * S; j < (hd + 1) * S; ++j) ss += std::pow(at(k, t * C + j) * at(k_k, j), 2);
      const double inv = 1.0 / std::max(std::sqrt(ss), 1e-12);
      for (int64_t j = hd * S; j < (hd + 1) * S; ++j) {
        const double kv = at(k, t * C + j), ka_d = kv * at(k_a, j);
        const double av = 1.0 / (1.0 + std::exp(-(at(al, t * C + j) + at(a0, j))));
        const double kkv = kv * at(k_k, j) * inv;
        want[0][j] = std::exp(-0.606531 / (1.0 + std::exp(-(at(wl, t * C + j) + at(w0, j)))));
        want[1][j] = kv + av * ka_d - ka_d;
        want[2][j] = -kkv;
        want[3][j] = kkv * av;
      }
    }
    for (int p = 0; p < 4; ++p)
      for (int64_t j = 0; j < C; ++j) {
        const float got = y->ptr<float>()[(p * T + t) * C + j];
        ASSERT_NEAR(got, want[p][j], 2e-6 * (std::abs(want[p][j]) + 1.0))
            << "plane " << p << " token " << t << " ch " << j;
        ASSERT_EQ(got, chain[size_t(p)]->ptr<float>()[t * C + j]) << "plane " << p << " token " << t << " ch " << j;
      }
  }
}

// WKV7_OUTPUT against double math, and bit for bit against the MUL, SUM_ROWS and ADD nodes it replaces.
TEST_P(RwkvOps, Wkv7OutputMatchesDoubleMathAndTheUnfusedChain) {
  Harness h(GetParam());
  const int64_t S = 20, H = 3, C = S * H, T = 5;
  Graph& g = *h.g;
  std::array<Tensor*, 5> in{};  // y, r, k, v, gate
  const char* names[5] = {"y", "r", "k", "v", "gate"};
  for (int i = 0; i < 5; ++i) in[size_t(i)] = h.input(DType::F32, {C, T, 1, 1}, names[i]);
  Tensor* r_k = h.input(DType::F32, {C, 1, 1, 1}, "r_k");
  Tensor* out = g.wkv7_output(in[0], in[1], in[2], in[3], r_k, in[4], S);
  ASSERT_EQ(out->ne, in[0]->ne);
  auto heads = [&](Tensor* x) { return g.reshape(x, {S, H, T, 1}); };
  Tensor* rk = g.sum_rows(g.mul(g.mul(heads(in[2]), heads(in[1])), g.reshape(r_k, {S, H, 1, 1})));
  Tensor* chain = g.mul(g.add(in[0], g.reshape(g.mul(heads(in[3]), rk), {C, T, 1, 1})), in[4]);
  auto sg = h.schedule({out, chain});
  for (Tensor* x : in) h.fill(x, -2, 2);
  h.fill(r_k, -1, 1);
  sg->run();
  auto at = [](Tensor* t, int64_t i) { return double(t->ptr<float>()[i]); };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < H; ++hd) {
      double sum = 0;
      for (int64_t j = hd * S; j < (hd + 1) * S; ++j) sum += at(in[2], t * C + j) * at(in[1], t * C + j) * at(r_k, j);
      for (int64_t j = hd * S; j < (hd + 1) * S; ++j) {
        const int64_t i = t * C + j;
        const double want = (at(in[0], i) + at(in[3], i) * sum) * at(in[4], i);
        const float got = out->ptr<float>()[i];
        ASSERT_NEAR(got, want, 2e-6 * (std::abs(want) + 4.0)) << "token " << t << " ch " << j;
        ASSERT_EQ(got, chain->ptr<float>()[i]) << "token " << t << " ch " << j;
      }
    }
}

// WKV7_VALUE_MIX against double math, and bit for bit against the ADD, UNARY, SCALE, ADD, MUL, ADD nodes it
// replaces (C = 67: the sigmoid kernels' tails).
TEST_P(RwkvOps, Wkv7ValueMixMatchesDoubleMathAndTheUnfusedChain) {
  Harness h(GetParam());
  const int64_t C = 67, T = 5;
  Graph& g = *h.g;
  Tensor* v = h.input(DType::F32, {C, T, 1, 1}, "v");
  Tensor* v_first = h.input(DType::F32, {C, T, 1, 1}, "v_first");
  Tensor* vl = h.input(DType::F32, {C, T, 1, 1}, "vl");
  Tensor* v0 = h.input(DType::F32, {C, 1, 1, 1}, "v0");
  Tensor* out = g.wkv7_value_mix(v, v_first, vl, v0);
  ASSERT_EQ(out->ne, v->ne);
  Tensor* mix = g.unary(g.add(vl, v0), UnaryFn::Sigmoid);
  Tensor* chain = g.add(v, g.mul(g.add(v_first, g.scale(v, -1.0f)), mix));
  auto sg = h.schedule({out, chain});
  h.fill(v, -2, 2);
  h.fill(v_first, -2, 2);
  h.fill(vl, -6, 6);
  h.fill(v0, -1, 1);
  sg->run();
  auto at = [](Tensor* t, int64_t i) { return double(t->ptr<float>()[i]); };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t i = t * C + j;
      const double m = 1.0 / (1.0 + std::exp(-(at(vl, i) + at(v0, j))));
      const double want = at(v, i) + (at(v_first, i) - at(v, i)) * m;
      const float got = out->ptr<float>()[i];
      ASSERT_NEAR(got, want, 2e-6 * (std::abs(want) + 2.0)) << "token " << t << " ch " << j;
      ASSERT_EQ(got, chain->ptr<float>()[i]) << "token " << t << " ch " << j;
    }
}

// Gemma's soft-cap (UNARY softcap) against double math and bit for bit against the SCALE, tanh, SCALE chain
// it replaces, on one long row (a decode step's logits: the threads split the row's elements) and on three rows.
TEST_P(RwkvOps, SoftCapMatchesDoubleMathAndTheUnfusedChain) {
  for (const auto& ne : {std::array<int64_t, 4>{40001, 1, 1, 1}, std::array<int64_t, 4>{333, 3, 1, 1}}) {
    Harness h(GetParam());
    const float cap = 30.0f;
    Tensor* x = h.input(DType::F32, ne, "x");
    Tensor* y = h.g->softcap(x, cap);
    Tensor* chain = h.g->scale(h.g->tanh(h.g->scale(x, 1.0f / cap)), cap);
    auto sg = h.schedule({y, chain});
    h.fill(x, -100, 100);
    sg->run();
    for (int64_t i = 0; i < x->n_elements(); ++i) {
      const double want = 30.0 * std::tanh(double(x->ptr<float>()[i]) / 30.0);
      ASSERT_NEAR(y->ptr<float>()[i], want, 3e-6 * 30.0) << i;
      ASSERT_EQ(y->ptr<float>()[i], chain->ptr<float>()[i]) << i;
    }
  }
}

// The recurrence in double, token after token, with the state of each slot.
TEST_P(RwkvOps, Wkv7MatchesDoubleRecurrence) {
  Harness h(GetParam());
  const int64_t S = 16, H = 3, T = 7, NS = 2;
  std::array<Tensor*, 6> in{};
  const char* names[6] = {"r", "w", "k", "v", "a", "b"};
  for (int i = 0; i < 6; ++i) in[size_t(i)] = h.input(DType::F32, {S, H, T, 1}, names[i]);
  Tensor* state = h.input(DType::F32, {S * S * H, NS, 1, 1}, "state");
  Tensor* slots = h.input(DType::I32, {T, 1, 1, 1}, "slots");
  Tensor* y = h.g->wkv7(in[0], in[1], in[2], in[3], in[4], in[5], state, slots);
  auto sg = h.schedule({y});
  h.fill(in[0]);
  h.fill(in[1], 0.5f, 1.0f);
  h.fill(in[2]);
  h.fill(in[3]);
  h.fill(in[4], -0.2f, 0.2f);
  h.fill(in[5], -0.2f, 0.2f);
  h.fill(state);
  const int32_t sl[T] = {1, 0, 0, 1, 1, 0, 1};
  std::memcpy(slots->data, sl, sizeof sl);
  std::vector<double> st(state->ptr<float>(), state->ptr<float>() + S * S * H * NS);
  sg->run();
  auto at = [&](int i, int64_t t, int64_t hh, int64_t j) {
    return double(in[size_t(i)]->ptr<float>()[(t * H + hh) * S + j]);
  };
  double max_err = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hh = 0; hh < H; ++hh) {
      double* m = st.data() + sl[t] * S * S * H + hh * S * S;
      for (int64_t i = 0; i < S; ++i) {
        double sa = 0, acc = 0;
        for (int64_t j = 0; j < S; ++j) sa += at(4, t, hh, j) * m[i * S + j];
        for (int64_t j = 0; j < S; ++j) {
          m[i * S + j] = m[i * S + j] * at(1, t, hh, j) + at(3, t, hh, i) * at(2, t, hh, j) + sa * at(5, t, hh, j);
          acc += m[i * S + j] * at(0, t, hh, j);
        }
        const double got = y->ptr<float>()[(t * H + hh) * S + i];
        max_err = std::max(max_err, std::abs(got - acc));
        ASSERT_NEAR(got, acc, 1e-4 * (1 + std::abs(acc))) << "t " << t << " head " << hh << " i " << i;
      }
    }
  for (size_t i = 0; i < st.size(); ++i) ASSERT_NEAR(state->ptr<float>()[i], st[i], 1e-4 * (1 + std::abs(st[i]))) << i;
  EXPECT_LT(max_err, 1e-4);
}

TEST(RwkvOpsShapes, BadShapesAreClearErrors) {
  Graph g;
  Tensor* x = g.new_leaf("x", DType::F32, {8, 4, 1, 1}, TensorRole::Input);
  Tensor* st = g.new_leaf("st", DType::F32, {9, 2, 1, 1}, TensorRole::Input);
  Tensor* sl = g.new_leaf("sl", DType::I32, {4, 1, 1, 1}, TensorRole::Input);
  EXPECT_THROW(g.token_shift(x, st, sl), Error);
  Tensor* r = g.new_leaf("r", DType::F32, {4, 2, 4, 1}, TensorRole::Input);
  Tensor* bad = g.new_leaf("bad", DType::F32, {4, 2, 3, 1}, TensorRole::Input);
  Tensor* ws = g.new_leaf("ws", DType::F32, {32, 1, 1, 1}, TensorRole::Input);
  EXPECT_THROW(g.wkv7(r, r, r, bad, r, r, ws, sl), Error);
  EXPECT_THROW(g.unary(x, UnaryFn(9)), Error);
  EXPECT_THROW(g.unary(x, UnaryFn::SoftCap), Error);  // needs its cap: softcap()
  EXPECT_THROW(g.softcap(x, 0.0f), Error);
  EXPECT_THROW(g.lerp(x, st, x), Error);  // p of another shape
  {
    Tensor* k = g.new_leaf("k", DType::F32, {64, 3, 1, 1}, TensorRole::Input);
    Tensor* v = g.new_leaf("vec", DType::F32, {64, 1, 1, 1}, TensorRole::Input);
    Tensor* k2 = g.new_leaf("k2", DType::F32, {64, 2, 1, 1}, TensorRole::Input);
    Tensor* v2 = g.new_leaf("vec2", DType::F32, {32, 1, 1, 1}, TensorRole::Input);
    Tensor* kh = g.new_leaf("kh", DType::F16, {64, 3, 1, 1}, TensorRole::Input);
    EXPECT_NO_THROW(g.wkv7_inputs(k, k, k, v, v, v, v, 16, 1e-12f));
    EXPECT_THROW(g.wkv7_inputs(k, k2, k, v, v, v, v, 16, 1e-12f), Error);  // a LoRA output of another shape
    EXPECT_THROW(g.wkv7_inputs(k, k, k, v, v2, v, v, 16, 1e-12f), Error);  // a vector of another C
    EXPECT_THROW(g.wkv7_inputs(k, k, k, v, v, v, v, 24, 1e-12f), Error);   // a head size that does not divide C
    EXPECT_THROW(g.wkv7_inputs(kh, k, k, v, v, v, v, 16, 1e-12f), Error);  // f16 k
    EXPECT_NO_THROW(g.wkv7_output(k, k, k, k, v, k, 16));
    EXPECT_THROW(g.wkv7_output(k, k, k2, k, v, k, 16), Error);  // k of another shape
    EXPECT_THROW(g.wkv7_output(k, k, k, k, v2, k, 16), Error);  // r_k of another C
    EXPECT_THROW(g.wkv7_output(k, k, k, k, v, k, 24), Error);   // a head size that does not divide C
    EXPECT_THROW(g.wkv7_output(kh, k, k, k, v, k, 16), Error);  // f16 y
    EXPECT_NO_THROW(g.wkv7_value_mix(k, k, k, v));
    EXPECT_THROW(g.wkv7_value_mix(k, k2, k, v), Error);  // v_first of another shape
    EXPECT_THROW(g.wkv7_value_mix(k, k, k2, v), Error);  // a LoRA output of another shape
    EXPECT_THROW(g.wkv7_value_mix(k, k, k, v2), Error);  // v0 of another C
    EXPECT_THROW(g.wkv7_value_mix(kh, k, k, v), Error);  // f16 v
  }
  EXPECT_THROW(g.lerp(x, x, g.new_leaf("m", DType::F32, {4, 6, 1, 1}, TensorRole::Input)), Error);  // mix of another C
}

INSTANTIATE_TEST_SUITE_P(Threads, RwkvOps, ::testing::Values(1, 3));

}  // namespace
}  // namespace opal
