// Each CPU op against straightforward double-precision math on random
// inputs, run through the scheduler like a model graph (1 and 3 threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/factory/backend_factory.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/registry.h"
#include "graph/scheduler.h"
#include "support/isa_coverage.h"

namespace opal {
namespace {

struct OpHarness {
  std::unique_ptr<Registry> reg;
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  std::mt19937 rng{42};
  explicit OpHarness(int threads = 1) : reg(make_registry({}, threads)) {}

  Tensor* input(DType t, std::array<int64_t, 4> ne, const std::string& name = "x") {
    return g->new_leaf(name, t, ne, TensorRole::Input);
  }
  std::unique_ptr<ScheduledGraph> schedule(Tensor* out) {
    g->mark_output(out);
    return Scheduler(*reg).schedule(std::move(g));
  }
  void fill(Tensor* t, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> d(lo, hi);
    if (t->type == DType::F32) {
      for (int64_t i = 0; i < t->n_elements(); ++i) t->ptr<float>()[i] = d(rng);
    } else if (t->type == DType::F16) {
      for (int64_t i = 0; i < t->n_elements(); ++i) t->ptr<uint16_t>()[i] = f32_to_f16(d(rng));
    }
  }
};

std::vector<float> f32s(const Tensor* t) {
  return std::vector<float>(t->ptr<float>(), t->ptr<float>() + t->n_elements());
}

// n values uniform in [-1, 1).
std::vector<float> uniform_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// N rows of K uniform values quantized to t by the reference quantizer (the GGUF layout).
std::vector<uint8_t> quantized_rows(DType t, int K, int N, std::mt19937& rng) {
  const std::vector<float> wf = uniform_values(size_t(K) * N, rng);
  std::vector<uint8_t> wq(row_bytes(t, K) * N);
  quantize_rows(t, wf.data(), wq.data(), N, K);
  return wq;
}

class OpsThreads : public ::testing::TestWithParam<int> {};

TEST_P(OpsThreads, RmsNormMulAdd) {
  OpHarness h(GetParam());
  Tensor* x = h.input(DType::F32, {64, 7, 1, 1});
  Tensor* w = h.input(DType::F32, {64, 1, 1, 1}, "w");
  Tensor* b = h.input(DType::F32, {64, 7, 1, 1}, "b");
  Tensor* out = h.g->add(h.g->mul(h.g->rms_norm(x, 1e-5f), w), b);
  auto sg = h.schedule(out);
  h.fill(x);
  h.fill(w);
  h.fill(b);
  sg->run();
  for (int r = 0; r < 7; ++r) {
    double ss = 0;
    for (int i = 0; i < 64; ++i) ss += double(x->ptr<float>()[r * 64 + i]) * x->ptr<float>()[r * 64 + i];
    const double s = 1.0 / std::sqrt(ss / 64 + 1e-5);
    for (int i = 0; i < 64; ++i) {
      const double want = x->ptr<float>()[r * 64 + i] * s * w->ptr<float>()[i] + b->ptr<float>()[r * 64 + i];
      EXPECT_NEAR(out->ptr<float>()[r * 64 + i], want, 1e-5);
    }
  }
}

TEST_P(OpsThreads, MulMatF32AndF16) {
  for (DType wt : {DType::F32, DType::F16}) {
    OpHarness h(GetParam());
    Tensor* w = h.input(wt, {96, 33, 1, 1}, "w");
    Tensor* x = h.input(DType::F32, {96, 5, 1, 1});
    Tensor* y = h.g->mul_mat(w, x);
    auto sg = h.schedule(y);
    h.fill(w);
    h.fill(x);
    sg->run();
    for (int t = 0; t < 5; ++t)
      for (int n = 0; n < 33; ++n) {
        double want = 0;
        for (int k = 0; k < 96; ++k) {
          const double wv = wt == DType::F32 ? w->ptr<float>()[n * 96 + k] : f16_to_f32(w->ptr<uint16_t>()[n * 96 + k]);
          double xv = x->ptr<float>()[t * 96 + k];
          if (wt == DType::F16) xv = f16_to_f32(f32_to_f16(float(xv)));  // llama.cpp's f16 activations
          want += wv * xv;
        }
        EXPECT_NEAR(y->ptr<float>()[t * 33 + n], want, 1e-4) << dtype_name(wt);
      }
  }
}

TEST_P(OpsThreads, MulMatQ8_0MatchesDequantizedMath) {
  OpHarness h(GetParam());
  const int K = 64, N = 9, T = 4;
  std::vector<float> wf(K * N);
  std::uniform_real_distribution<float> d(-1, 1);
  for (float& v : wf) v = d(h.rng);
  std::vector<uint8_t> wq(row_bytes(DType::Q8_0, K) * N);
  quantize_rows(DType::Q8_0, wf.data(), wq.data(), N, K);
  Tensor* w = h.input(DType::Q8_0, {K, N, 1, 1}, "w");
  Tensor* x = h.input(DType::F32, {K, T, 1, 1});
  Tensor* y = h.g->mul_mat(w, x);
  auto sg = h.schedule(y);
  std::memcpy(w->data, wq.data(), wq.size());
  h.fill(x);
  sg->run();
  std::vector<float> wd(K), xd(K);
  for (int t = 0; t < T; ++t) {
    cpu::round_activations(DType::Q8_0, x->ptr<float>() + t * K, xd.data(), K);
    for (int n = 0; n < N; ++n) {
      dequantize_row(DType::Q8_0, wq.data() + n * row_bytes(DType::Q8_0, K), wd.data(), K);
      double want = 0;
      for (int k = 0; k < K; ++k) want += double(wd[k]) * xd[k];
      EXPECT_NEAR(y->ptr<float>()[t * N + n], want, 1e-4);
    }
  }
}

// Prompt batches are split between threads in 32-row units (whole kernel
// slices); a row's result must not depend on the split: the same bits as one
// thread for row counts that are not multiples of 32 (200 = 6 x 32 + 8, 24)
// and a batch over the small-batch size.
TEST_P(OpsThreads, MulMatQ4_0PromptBatchIsTheSameBitsOnAnySplit) {
  const int K = 96, T = 21;
  for (int N : {200, 24}) {
    std::vector<float> wf(size_t(K) * N);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& v : wf) v = d(rng);
    std::vector<uint8_t> wq(row_bytes(DType::Q4_0, K) * N);
    quantize_rows(DType::Q4_0, wf.data(), wq.data(), N, K);
    std::vector<float> xs(size_t(K) * T);
    for (float& v : xs) v = d(rng);
    auto run = [&](int threads) {
      OpHarness h(threads);
      Tensor* w = h.input(DType::Q4_0, {K, N, 1, 1}, "w");
      Tensor* x = h.input(DType::F32, {K, T, 1, 1});
      Tensor* y = h.g->mul_mat(w, x);
      auto sg = h.schedule(y);
      std::memcpy(w->data, wq.data(), wq.size());
      std::memcpy(x->data, xs.data(), xs.size() * sizeof(float));
      sg->run();
      return f32s(y);
    };
    const std::vector<float> one = run(1), many = run(GetParam());
    ASSERT_EQ(one.size(), size_t(N) * T);
    for (size_t i = 0; i < one.size(); ++i)
      ASSERT_EQ(std::memcmp(&one[i], &many[i], sizeof(float)), 0)
          << "N " << N << ", token " << i / N << ", row " << i % N << ": " << one[i] << " vs " << many[i];
    double sum = 0;  // and not all zero
    for (float v : one) sum += std::fabs(v);
    EXPECT_GT(sum, 0.0);
  }
}

// Mid-size batches on row-group weights (stop 17: packed_reads sends batches of
// up to packed_mid_act rows to the group kernels): each row of a 17-48-row
// batch gets the bits it gets alone (decode), on every ISA and split across
// threads, where the kernels promise it: Q4_0 in every batch order, Q8_0 and
// Q5_0 in llama.cpp's order (their lanes order is another summation).
TEST_P(OpsThreads, MulMatMidBatchOnRowGroupsIsTheRowsOneByOne) {
  const int K = 96, N = 200, kMaxT = 48;
  std::mt19937 rng(9);
  const std::vector<float> xs = uniform_values(size_t(K) * kMaxT, rng);
  const cpu::Isa isa_before = cpu::selected_isa();
  int checked = 0, checked_mid = 0;
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
    cpu::set_isa(isa);
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
      const cpu::MatmulKernels* k = cpu::matmul_kernels(t);
      if (!k || (k->packed_layout != cpu::kLayoutRowGroups8 && k->packed_layout != cpu::kLayoutQ5Groups8)) continue;
      std::vector<uint8_t> wq = quantized_rows(t, K, N, rng);
      cpu::repack_matrix(k->packed_layout, t, wq.data(), K, N);
      // T rows at once, or (T = 0) each of kMaxT rows alone through a one-row graph.
      auto run = [&](int T) {
        OpHarness h(GetParam());
        Tensor* w = h.input(t, {K, N, 1, 1}, "w");
        w->layout = k->packed_layout;  // before scheduling: the work size counts the unpack scratch
        Tensor* x = h.input(DType::F32, {K, T == 0 ? 1 : T, 1, 1});
        Tensor* y = h.g->mul_mat(w, x);
        auto sg = h.schedule(y);
        std::memcpy(w->data, wq.data(), wq.size());
        std::vector<float> out;
        for (int r = 0; r < (T == 0 ? kMaxT : 1); ++r) {
          std::memcpy(x->data, xs.data() + size_t(r) * K, size_t(K) * (T == 0 ? 1 : T) * sizeof(float));
          sg->run();
          const std::vector<float> o = f32s(y);
          out.insert(out.end(), o.begin(), o.end());
        }
        return out;
      };
      for (cpu::BatchOrder order : {cpu::BatchOrder::by_type, cpu::BatchOrder::llama, cpu::BatchOrder::lanes}) {
        cpu::set_batch_order(order);
        if (t != DType::Q4_0 && cpu::lanes_order(t)) continue;
        // Alone under the same order (stop 25: avx2's Q5_0 decode follows it too).
        const std::vector<float> alone = run(0);
        double sum = 0;  // not all zero
        for (float v : alone) sum += std::fabs(v);
        EXPECT_GT(sum, 0.0) << cpu::isa_name(isa) << " " << dtype_name(t);
        for (int T : {17, 20, 33, 48}) {
          const std::vector<float> batch = run(T);
          ASSERT_EQ(batch.size(), size_t(N) * T);
          for (size_t i = 0; i < batch.size(); ++i)
            ASSERT_EQ(std::memcmp(&alone[i], &batch[i], sizeof(float)), 0)
                << cpu::isa_name(isa) << " " << dtype_name(t) << " T " << T << ", token " << i / N << ", row " << i % N
                << ": " << alone[i] << " alone vs " << batch[i];
          ++checked;
          if (cpu::packed_reads(*k, T)) ++checked_mid;
        }
      }
      cpu::set_batch_order(cpu::BatchOrder::by_type);
    }
  }
  cpu::set_isa(isa_before);
#if defined(__x86_64__)
  if (cpu::host_supports(cpu::Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: no row-group batch was checked";
  }
  if (cpu::host_supports(cpu::Isa::avx512)) {
    EXPECT_GT(checked_mid, 0) << "AVX-512 host: no batch above 16 rows took the group kernels";
  }
#endif
}

// Prompt batches on K-quant row groups (Q4_K, Q6_K): whichever form the entry runs on the groups (gemm_packed_batch:
// the in-place group kernels, or on AVX-512 from 32 / 16 rows the plain RowsInLanes reading the groups, stop 34;
// KGroups.Avx512PromptsRunOnTheGroupsWithThePlainBits), or where it declines and MUL_MAT unpacks the rows for the
// plain entry, every output is the plain layout's bits, on every ISA and split across threads. N = 75: nine groups
// and three plain rows after them.
TEST_P(OpsThreads, MulMatKQuantPromptOnGroupsIsThePlainBits) {
  const int K = 512, N = 75, kMaxT = 130;
  std::mt19937 rng(17);
  const std::vector<float> xs = uniform_values(size_t(K) * kMaxT, rng);
  const cpu::Isa isa_before = cpu::selected_isa();
  int checked = 0;
  for (cpu::Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; }, false)) {
    cpu::set_isa(isa);
    for (DType t : {DType::Q4_K, DType::Q6_K}) {
      const cpu::MatmulKernels* k = cpu::matmul_kernels(t);
      if (!k || !cpu::is_k_groups_layout(k->packed_layout)) continue;
      const std::vector<uint8_t> plain = quantized_rows(t, K, N, rng);
      std::vector<uint8_t> packed = plain;
      cpu::repack_matrix(k->packed_layout, t, packed.data(), K, N);
      auto run = [&](int T, uint8_t layout) {
        OpHarness h(GetParam());
        Tensor* w = h.input(t, {K, N, 1, 1}, "w");
        w->layout = layout;  // before scheduling: the work size counts the unpack scratch
        Tensor* x = h.input(DType::F32, {K, T, 1, 1});
        Tensor* y = h.g->mul_mat(w, x);
        auto sg = h.schedule(y);
        const std::vector<uint8_t>& bytes = layout == cpu::kLayoutPlain ? plain : packed;
        std::memcpy(w->data, bytes.data(), bytes.size());
        std::memcpy(x->data, xs.data(), size_t(K) * T * sizeof(float));
        sg->run();
        return f32s(y);
      };
      for (int T : {9, 16, 31, 32, 128, 130}) {
        const std::vector<float> want = run(T, cpu::kLayoutPlain), got = run(T, k->packed_layout);
        ASSERT_EQ(want.size(), size_t(N) * T);
        double sum = 0;  // not all zero
        for (float v : want) sum += std::fabs(v);
        EXPECT_GT(sum, 0.0);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
              << cpu::isa_name(isa) << " " << dtype_name(t) << " T " << T << ", token " << i / N << ", row " << i % N
              << ": " << want[i] << " plain vs " << got[i] << " on the groups";
        ++checked;
      }
    }
  }
  cpu::set_isa(isa_before);
#if defined(__x86_64__)
  if (cpu::host_supports(cpu::Isa::avx2)) {
    EXPECT_GT(checked, 0) << "AVX2 host: no K-quant group prompt was checked";
  }
#endif
}

TEST_P(OpsThreads, SoftmaxSwigluSiluScaleSumDiv) {
  OpHarness h(GetParam());
  Tensor* a = h.input(DType::F32, {10, 3, 1, 1}, "a");
  Tensor* b = h.input(DType::F32, {10, 3, 1, 1}, "b");
  Tensor* sm = h.g->softmax(a);
  Tensor* sw = h.g->swiglu(a, b);
  Tensor* sc = h.g->scale(h.g->silu(b), 0.5f);
  Tensor* dv = h.g->div(a, h.g->sum_rows(b));
  h.g->mark_output(sm);
  h.g->mark_output(sw);
  h.g->mark_output(sc);
  auto sg = h.schedule(dv);
  h.fill(a, -3, 3);
  h.fill(b, 0.5, 2);
  sg->run();
  for (int r = 0; r < 3; ++r) {
    const float* x = a->ptr<float>() + r * 10;
    const float* y = b->ptr<float>() + r * 10;
    double mx = -1e30, sum = 0, bsum = 0;
    for (int i = 0; i < 10; ++i) mx = std::max(mx, double(x[i]));
    for (int i = 0; i < 10; ++i) sum += std::exp(x[i] - mx), bsum += y[i];
    for (int i = 0; i < 10; ++i) {
      EXPECT_NEAR(sm->ptr<float>()[r * 10 + i], std::exp(x[i] - mx) / sum, 1e-6);
      EXPECT_NEAR(sw->ptr<float>()[r * 10 + i], x[i] / (1 + std::exp(-double(x[i]))) * y[i], 1e-5);
      EXPECT_NEAR(sc->ptr<float>()[r * 10 + i], 0.5 * y[i] / (1 + std::exp(-double(y[i]))), 1e-6);
      EXPECT_NEAR(dv->ptr<float>()[r * 10 + i], x[i] / bsum, 1e-6);
    }
  }
}

TEST_P(OpsThreads, RopeNormalAndNeoxWithFreqFactors) {
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
    OpHarness h(GetParam());
    const int D = 16, H = 3, T = 5, n_rot = 12;
    Tensor* x = h.input(DType::F32, {D, H, T, 1});
    Tensor* pos = h.input(DType::I32, {T, 1, 1, 1}, "pos");
    Tensor* ff = h.input(DType::F32, {n_rot / 2, 1, 1, 1}, "ff");
    Tensor* y = h.g->rope(x, pos, ff, n_rot, mode, 10000.0f, 1.0f);
    auto sg = h.schedule(y);
    h.fill(x);
    for (int t = 0; t < T; ++t) pos->ptr<int32_t>()[t] = 100 * t + 3;
    for (int i = 0; i < n_rot / 2; ++i) ff->ptr<float>()[i] = 1.0f + float(i);
    sg->run();
    for (int t = 0; t < T; ++t)
      for (int hh = 0; hh < H; ++hh) {
        const float* src = x->ptr<float>() + (t * H + hh) * D;
        const float* dst = y->ptr<float>() + (t * H + hh) * D;
        for (int i = 0; i < n_rot / 2; ++i) {
          const double theta = double(pos->ptr<int32_t>()[t]) * std::pow(10000.0, -2.0 * i / n_rot) / (1.0 + i);
          const int a = mode == RopeMode::Neox ? i : 2 * i;
          const int b = mode == RopeMode::Neox ? i + n_rot / 2 : 2 * i + 1;
          EXPECT_NEAR(dst[a], src[a] * std::cos(theta) - src[b] * std::sin(theta), 2e-4);
          EXPECT_NEAR(dst[b], src[a] * std::sin(theta) + src[b] * std::cos(theta), 2e-4);
        }
        for (int i = n_rot; i < D; ++i) EXPECT_EQ(dst[i], src[i]);
      }
  }
}

TEST_P(OpsThreads, AttentionCausalGqaF32Cache) {
  OpHarness h(GetParam());
  const int Dk = 8, Hq = 4, Hkv = 2, T = 6, cells = 8;
  Tensor* q = h.input(DType::F32, {Dk, Hq, T, 1}, "q");
  Tensor* k = h.input(DType::F32, {Dk * Hkv, T, 1, 1}, "k");
  Tensor* v = h.input(DType::F32, {Dk * Hkv, T, 1, 1}, "v");
  Tensor* kc = h.input(DType::F32, {Dk * Hkv, cells, 1, 1}, "kc");
  Tensor* vc = h.input(DType::F32, {Dk * Hkv, cells, 1, 1}, "vc");
  Tensor* store = h.input(DType::I32, {T, 1, 1, 1}, "store");
  Tensor* tok = h.input(DType::I32, {2, T, 1, 1}, "tok");
  Tensor* cell = h.input(DType::I32, {2, cells, 1, 1}, "cell");
  Tensor* ks = h.g->kv_store(kc, k, store);
  Tensor* vs = h.g->kv_store(vc, v, store);
  Tensor* out = h.g->attention(q, ks, vs, tok, cell, Hkv, 0.3f);
  auto sg = h.schedule(out);
  h.fill(q);
  h.fill(k);
  h.fill(v);
  // tokens go to cells in reverse order; two cells stay empty
  for (int t = 0; t < T; ++t) {
    store->ptr<int32_t>()[t] = T - 1 - t;
    tok->ptr<int32_t>()[2 * t] = t;
    tok->ptr<int32_t>()[2 * t + 1] = 0;
  }
  for (int c = 0; c < cells; ++c) {
    const int t = c < T ? T - 1 - c : -1;
    cell->ptr<int32_t>()[2 * c] = t;
    cell->ptr<int32_t>()[2 * c + 1] = t < 0 ? -1 : 0;
  }
  sg->run();
  for (int t = 0; t < T; ++t)
    for (int hh = 0; hh < Hq; ++hh) {
      const int g = hh / (Hq / Hkv);
      std::vector<double> s(size_t(t + 1));
      double mx = -1e30, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double d = 0;
        for (int i = 0; i < Dk; ++i)
          d += double(q->ptr<float>()[(t * Hq + hh) * Dk + i]) * k->ptr<float>()[j * Dk * Hkv + g * Dk + i];
        s[size_t(j)] = d * 0.3;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < Dk; ++i) {
        double want = 0;
        for (int j = 0; j <= t; ++j) want += s[size_t(j)] / sum * v->ptr<float>()[j * Dk * Hkv + g * Dk + i];
        EXPECT_NEAR(out->ptr<float>()[t * Dk * Hq + hh * Dk + i], want, 1e-5);
      }
    }
}

// A batch that interleaves three sequences over shuffled cells, one with its
// positions out of order, then a long run of one sequence: every CPU ISA
// (AVX-512 takes the block path, kernels/attn_kernels.h) gives the same bits.
TEST_P(OpsThreads, AttentionF16InterleavedSequencesSameBitsOnEveryIsa) {
  OpHarness h(GetParam());
  const int Dk = 64, Hq = 6, Hkv = 2, T = 45, cells = 64;
  Tensor* q = h.input(DType::F32, {Dk, Hq, T, 1}, "q");
  Tensor* kc = h.input(DType::F16, {Dk * Hkv, cells, 1, 1}, "kc");
  Tensor* vc = h.input(DType::F16, {Dk * Hkv, cells, 1, 1}, "vc");
  Tensor* tok = h.input(DType::I32, {2, T, 1, 1}, "tok");
  Tensor* cell = h.input(DType::I32, {2, cells, 1, 1}, "cell");
  Tensor* out = h.g->attention(q, kc, vc, tok, cell, Hkv, 0.125f);
  auto sg = h.schedule(out);
  h.fill(q, -2, 2);
  h.fill(kc, -2, 2);
  h.fill(vc);
  // cached before this batch: seq 0 at 0..9, seq 2 at 0..2
  std::vector<std::pair<int32_t, int32_t>> live;  // (pos, seq) per used cell
  for (int32_t p = 0; p < 10; ++p) live.push_back({p, 0});
  for (int32_t p = 0; p < 3; ++p) live.push_back({p, 2});
  const int32_t seq1_pos[5] = {0, 2, 1, 3, 4};
  int32_t next[3] = {10, 0, 3};
  for (int t = 0; t < T; ++t) {
    const int32_t seq = t < 15 ? t % 3 : 0;
    const int32_t pos = seq == 1 ? seq1_pos[next[1]++] : next[seq]++;
    tok->ptr<int32_t>()[2 * t] = pos;
    tok->ptr<int32_t>()[2 * t + 1] = seq;
    live.push_back({pos, seq});
  }
  ASSERT_LE(live.size(), size_t(cells));
  while (live.size() < size_t(cells)) live.push_back({-1, -1});
  std::shuffle(live.begin(), live.end(), h.rng);
  for (int c = 0; c < cells; ++c) {
    cell->ptr<int32_t>()[2 * c] = live[size_t(c)].first;
    cell->ptr<int32_t>()[2 * c + 1] = live[size_t(c)].second;
  }
  const cpu::Isa before = cpu::selected_isa();
  std::vector<float> first;
  const std::vector<cpu::Isa> isas = test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; });
  for (cpu::Isa isa : isas) {
    cpu::set_isa(isa);
    std::fill(out->ptr<float>(), out->ptr<float>() + out->n_elements(), 7.0f);
    sg->run();
    if (first.empty()) {
      first = f32s(out);
      continue;
    }
    ASSERT_EQ(std::memcmp(first.data(), out->ptr<float>(), first.size() * 4), 0)
        << cpu::isa_name(isa) << " differs from " << cpu::isa_name(isas.front());
  }
  cpu::set_isa(before);
  for (float x : first) ASSERT_TRUE(std::isfinite(x));
}

TEST_P(OpsThreads, TopKGetRowsMulMatId) {
  OpHarness h(GetParam());
  const int E = 6, K = 2, T = 3, D = 8, F = 5;
  Tensor* logits = h.input(DType::F32, {E, T, 1, 1}, "logits");
  Tensor* experts = h.input(DType::F32, {D, F, E, 1}, "experts");
  Tensor* x = h.input(DType::F32, {D, 1, T, 1}, "x");
  Tensor* ids = h.g->top_k(logits, K);
  Tensor* sel = h.g->get_rows(h.g->reshape(logits, {1, E, T, 1}), ids);
  Tensor* y = h.g->mul_mat_id(experts, x, ids);
  h.g->mark_output(ids);
  h.g->mark_output(sel);
  auto sg = h.schedule(y);
  h.fill(logits);
  h.fill(experts);
  h.fill(x);
  sg->run();
  for (int t = 0; t < T; ++t) {
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    const float* l = logits->ptr<float>() + t * E;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    for (int j = 0; j < K; ++j) {
      ASSERT_EQ(ids->ptr<int32_t>()[t * K + j], order[j]);
      EXPECT_EQ(sel->ptr<float>()[t * K + j], l[order[j]]);
      for (int f = 0; f < F; ++f) {
        double want = 0;
        for (int d = 0; d < D; ++d)
          want += double(experts->ptr<float>()[(order[j] * F + f) * D + d]) * x->ptr<float>()[t * D + d];
        EXPECT_NEAR(y->ptr<float>()[(t * K + j) * F + f], want, 1e-5);
      }
    }
  }
}

TEST_P(OpsThreads, GetRowsF16AndStridedAddView) {
  OpHarness h(GetParam());
  Tensor* table = h.input(DType::F16, {8, 5, 1, 1}, "table");
  Tensor* ids = h.input(DType::I32, {3, 1, 1, 1}, "ids");
  Tensor* rows = h.g->get_rows(table, ids);  // [8, 3]
  // add rows 0 and 2 through strided views of [4, 2] halves
  Tensor* v0 = h.g->view(rows, {4, 3, 1, 1}, {4, 32, 96, 96}, 0);
  Tensor* v1 = h.g->view(rows, {4, 3, 1, 1}, {4, 32, 96, 96}, 16);
  Tensor* sum = h.g->add(v0, v1);
  auto sg = h.schedule(sum);
  h.fill(table);
  const int32_t idv[3] = {4, 0, 2};
  std::memcpy(ids->data, idv, sizeof idv);
  sg->run();
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 4; ++i) {
      const uint16_t* row = table->ptr<uint16_t>() + idv[r] * 8;
      EXPECT_FLOAT_EQ(sum->ptr<float>()[r * 4 + i], f16_to_f32(row[i]) + f16_to_f32(row[i + 4]));
    }
}

// GELU (tanh form) and GEGLU against double-precision math. The reference
// reads llama.cpp's f16 table: the input and the result are each rounded to
// f16 (relative 2^-11), and gelu' <= 1.13, so |error| <= 1.2e-3 |x| + 1e-6
// there; at and beyond +-10 the result is x or 0 exactly. Gemma's tanh
// (UNARY(tanh)): the C library's tanhf, within 1e-6.
TEST_P(OpsThreads, GeluGegluTanh) {
  OpHarness h(GetParam());
  const int K = 64, R = 5;
  Tensor* a = h.input(DType::F32, {K, R, 1, 1}, "a");
  Tensor* b = h.input(DType::F32, {K, R, 1, 1}, "b");
  Tensor* ge = h.g->gelu(a);
  Tensor* gg = h.g->geglu(a, b);
  Tensor* th = h.g->tanh(a);
  h.g->mark_output(ge);
  h.g->mark_output(gg);
  auto sg = h.schedule(th);
  h.fill(a, -12, 12);
  h.fill(b, -2, 2);
  a->ptr<float>()[0] = 10.0f, a->ptr<float>()[1] = -10.0f, a->ptr<float>()[2] = 0.0f, a->ptr<float>()[3] = 1e-3f;
  sg->run();
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  int inside = 0;
  for (int i = 0; i < K * R; ++i) {
    const double x = a->ptr<float>()[i], y = b->ptr<float>()[i];
    const double want = x >= 10 ? x : x <= -10 ? 0.0 : gelu(x);
    const double tol = 1.2e-3 * std::fabs(x) + 1e-6;
    inside += std::fabs(x) < 10;
    EXPECT_NEAR(ge->ptr<float>()[i], want, tol) << "x = " << x;
    EXPECT_NEAR(gg->ptr<float>()[i], want * y, tol * std::fabs(y) + 1e-6) << "x = " << x;
    EXPECT_NEAR(th->ptr<float>()[i], std::tanh(x), 1e-6) << "x = " << x;
  }
  EXPECT_GT(inside, K * R / 2);  // most inputs go through the table
  EXPECT_EQ(ge->ptr<float>()[0], 10.0f);
  EXPECT_EQ(ge->ptr<float>()[1], 0.0f);
  EXPECT_EQ(ge->ptr<float>()[2], 0.0f);
}

// Sliding-window attention: a query at position p sees the keys at p - W + 1
// .. p of its sequence. One sequence in order in an f16 cache (the block path
// on AVX-512) with W = 7: double-precision softmax over the window (q and p
// rounded to f16 by the op: 5e-3), and the same bits on every ISA.
TEST_P(OpsThreads, AttentionSlidingWindowF16SameBitsOnEveryIsa) {
  OpHarness h(GetParam());
  const int Dk = 64, Hq = 4, Hkv = 2, T = 40, cells = 48, W = 7;
  Tensor* q = h.input(DType::F32, {Dk, Hq, T, 1}, "q");
  Tensor* kc = h.input(DType::F16, {Dk * Hkv, cells, 1, 1}, "kc");
  Tensor* vc = h.input(DType::F16, {Dk * Hkv, cells, 1, 1}, "vc");
  Tensor* tok = h.input(DType::I32, {2, T, 1, 1}, "tok");
  Tensor* cell = h.input(DType::I32, {2, cells, 1, 1}, "cell");
  Tensor* out = h.g->attention(q, kc, vc, tok, cell, Hkv, 0.125f, W);
  EXPECT_EQ(out->iparams[1], W);
  auto sg = h.schedule(out);
  h.fill(q, -2, 2);
  h.fill(kc, -2, 2);
  h.fill(vc);
  for (int t = 0; t < T; ++t) tok->ptr<int32_t>()[2 * t] = t, tok->ptr<int32_t>()[2 * t + 1] = 0;
  for (int c = 0; c < cells; ++c) {
    cell->ptr<int32_t>()[2 * c] = c < T ? c : -1;
    cell->ptr<int32_t>()[2 * c + 1] = c < T ? 0 : -1;
  }
  const cpu::Isa before = cpu::selected_isa();
  std::vector<float> first;
  const std::vector<cpu::Isa> isas = test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; });
  for (cpu::Isa isa : isas) {
    cpu::set_isa(isa);
    sg->run();
    if (first.empty()) {
      first = f32s(out);
      continue;
    }
    ASSERT_EQ(std::memcmp(first.data(), out->ptr<float>(), first.size() * 4), 0)
        << cpu::isa_name(isa) << " differs from " << cpu::isa_name(isas.front());
  }
  cpu::set_isa(before);
  auto kv = [&](const Tensor* c, int cellno, int g, int i) {
    return double(f16_to_f32(c->ptr<uint16_t>()[cellno * Dk * Hkv + g * Dk + i]));
  };
  for (int t = 0; t < T; ++t)
    for (int hh = 0; hh < Hq; ++hh) {
      const int g = hh / (Hq / Hkv), j0 = std::max(0, t - W + 1);
      std::vector<double> s;
      double mx = -1e30, sum = 0;
      for (int j = j0; j <= t; ++j) {
        double d = 0;
        for (int i = 0; i < Dk; ++i) d += double(q->ptr<float>()[(t * Hq + hh) * Dk + i]) * kv(kc, j, g, i);
        s.push_back(d * 0.125);
        mx = std::max(mx, s.back());
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < Dk; ++i) {
        double want = 0;
        for (int j = j0; j <= t; ++j) want += s[size_t(j - j0)] / sum * kv(vc, j, g, i);
        EXPECT_NEAR(first[size_t(t * Dk * Hq + hh * Dk + i)], want, 5e-3) << "t " << t << " head " << hh;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Threads, OpsThreads, ::testing::Values(1, 3));

}  // namespace
}  // namespace opal
