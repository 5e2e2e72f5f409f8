// The RWKV-7 kernels of every ISA the host has (kernels/rwkv_kernels.h: the
// WKV-7 head update, exp and sigmoid rows) give exactly the bits of the
// scalar forms there, and those are within a few ulp of double-precision math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/rwkv_kernels.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace {

std::vector<const RwkvKernels*> simd_kernels() {
  std::vector<const RwkvKernels*> v;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    if (const RwkvKernels* k = rwkv_kernels()) v.push_back(k);
  }
  set_isa(before);
  return v;
}

bool same_bits_or_nan(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

TEST(RwkvKernels, Wkv7HeadEqualsTheScalarFormBitForBit) {
  if (host_supports(Isa::avx2)) {
    ASSERT_FALSE(simd_kernels().empty());
  }
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), decay(0.5f, 1.0f);
  for (const RwkvKernels* kern : simd_kernels()) {
    SCOPED_TRACE(kern->name);
    for (int64_t S : {16, 64, 128}) {
      std::vector<float> st(static_cast<size_t>(S * S)), r(static_cast<size_t>(S)), w(static_cast<size_t>(S)),
          k(static_cast<size_t>(S)), v(static_cast<size_t>(S)), a(static_cast<size_t>(S)), b(static_cast<size_t>(S));
      for (auto& x : st) x = u(rng);
      std::vector<float> st_ref = st, y(static_cast<size_t>(S)), y_ref(static_cast<size_t>(S));
      for (int step = 0; step < 5; ++step) {  // several tokens: the state carries the differences, if any
        for (auto* p : {&r, &k, &v, &a, &b}) {
          for (auto& x : *p) x = u(rng);
        }
        for (auto& x : w) x = decay(rng);
        kern->wkv7_head(st.data(), r.data(), w.data(), k.data(), v.data(), a.data(), b.data(), y.data(), S);
        rwkv_ref::wkv7_head(st_ref.data(), r.data(), w.data(), k.data(), v.data(), a.data(), b.data(), y_ref.data(), S);
        for (int64_t i = 0; i < S; ++i)
          ASSERT_TRUE(same_bits_or_nan(y[size_t(i)], y_ref[size_t(i)])) << "S " << S << " y " << i;
        for (size_t i = 0; i < st.size(); ++i)
          ASSERT_TRUE(same_bits_or_nan(st[i], st_ref[i])) << "S " << S << " state " << i;
      }
    }
  }
}

TEST(RwkvKernels, Wkv7ScalarFormMatchesDoubleMath) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t S = 64;
  std::vector<float> st(static_cast<size_t>(S * S)), r(static_cast<size_t>(S)), w(static_cast<size_t>(S)),
      k(static_cast<size_t>(S)), v(static_cast<size_t>(S)), a(static_cast<size_t>(S)), b(static_cast<size_t>(S)),
      y(static_cast<size_t>(S));
  for (auto* p : {&st, &r, &w, &k, &v, &a, &b}) {
    for (auto& x : *p) x = u(rng);
  }
  std::vector<double> sd(st.begin(), st.end()), yd(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    double sa = 0;
    for (int64_t j = 0; j < S; ++j) sa += double(a[size_t(j)]) * sd[size_t(i * S + j)];
    double acc = 0;
    for (int64_t j = 0; j < S; ++j) {
      double& s = sd[size_t(i * S + j)];
      s = s * w[size_t(j)] + double(v[size_t(i)]) * k[size_t(j)] + sa * b[size_t(j)];
      acc += s * r[size_t(j)];
    }
    yd[size_t(i)] = acc;
  }
  rwkv_ref::wkv7_head(st.data(), r.data(), w.data(), k.data(), v.data(), a.data(), b.data(), y.data(), S);
  for (int64_t i = 0; i < S; ++i) EXPECT_NEAR(y[size_t(i)], yd[size_t(i)], 1e-5) << i;
  for (size_t i = 0; i < st.size(); ++i) EXPECT_NEAR(st[i], sd[i], 1e-5) << i;
}

TEST(RwkvKernels, ExpAndSigmoidRowsEqualTheScalarFormsAndDoubleMath) {
  std::vector<float> x;
  for (float f = -110.0f; f <= 100.0f; f += 0.173f) x.push_back(f);
  for (float f : {0.0f, -0.0f, 88.7f, 88.73f, 89.0f, -87.3f, -103.9f, -104.0f, -150.0f, 1e-8f, -1e-8f, 1e30f, -1e30f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    x.push_back(f);
  for (int i = 0; i < 3; ++i) x.push_back(0.5f);  // a length that is not a multiple of 8 or 16
  const int64_t n = int64_t(x.size());
  for (int64_t i = 0; i < n; ++i) {  // the scalar forms against double math
    const double xd = x[size_t(i)];
    if (std::isnan(xd) || std::fabs(xd) > 80) continue;
    EXPECT_NEAR(rwkv_ref::exp1(x[size_t(i)]), std::exp(xd), 3e-7 * std::exp(xd)) << xd;
    EXPECT_NEAR(rwkv_ref::sigmoid1(x[size_t(i)]), 1.0 / (1.0 + std::exp(-xd)), 2e-7) << xd;
  }
  for (const RwkvKernels* kern : simd_kernels()) {
    SCOPED_TRACE(kern->name);
    for (int64_t len : {n, n - 1, int64_t(5), int64_t(16)}) {
      std::vector<float> e(static_cast<size_t>(len)), s(static_cast<size_t>(len));
      kern->exp_row(x.data(), e.data(), len);
      kern->sigmoid_row(x.data(), s.data(), len);
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_TRUE(same_bits_or_nan(e[size_t(i)], rwkv_ref::exp1(x[size_t(i)]))) << "exp " << x[size_t(i)];
        ASSERT_TRUE(same_bits_or_nan(s[size_t(i)], rwkv_ref::sigmoid1(x[size_t(i)]))) << "sigmoid " << x[size_t(i)];
      }
    }
  }
}

// LERP: the scalar form against double math (d * m + x with the two roundings: within 2 ulp of the exact
// value, as |d * m| <= |d| here), every SIMD form bit for bit against it; C = 773 gives whole 16- and
// 8-lane blocks and a tail; a form that fused the multiply and add into one FMA would differ somewhere.
TEST(RwkvKernels, LerpEqualsTheScalarFormAndDoubleMath) {
  const int64_t C = 773, N = 6;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-4, 4), u(0, 1);
  std::vector<float> x(static_cast<size_t>(C)), p(static_cast<size_t>(C)), mix(static_cast<size_t>(C * N));
  for (float& f : x) f = d(rng);
  for (float& f : p) f = d(rng);
  for (float& f : mix) f = u(rng);
  std::vector<float> ref(size_t(C * N * 2), -1.0f);
  rwkv_ref::lerp(x.data(), p.data(), mix.data(), N, ref.data(), 2 * C, C);  // y stride 2C: the gaps stay
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const double want = (double(p[size_t(j)]) - x[size_t(j)]) * mix[size_t(i * C + j)] + x[size_t(j)];
      ASSERT_NEAR(ref[size_t(i * 2 * C + j)], want, 1e-6 * (std::abs(want) + 8.0)) << i << " " << j;
      ASSERT_EQ(ref[size_t(i * 2 * C + C + j)], -1.0f);
    }
  int rounded_differently_from_fma = 0;
  for (int64_t j = 0; j < C; ++j) {
    const float dd = p[size_t(j)] - x[size_t(j)];
    rounded_differently_from_fma += std::fma(dd, mix[size_t(j)], x[size_t(j)]) != ref[size_t(j)];
  }
  EXPECT_GT(rounded_differently_from_fma, 0);  // the inputs tell the two roundings apart
  for (const RwkvKernels* kern : simd_kernels()) {
    SCOPED_TRACE(kern->name);
    for (int64_t len : {C, int64_t(16), int64_t(5)}) {
      std::vector<float> y(size_t(C * N * 2), -1.0f), want(size_t(C * N * 2), -1.0f);
      kern->lerp(x.data(), p.data(), mix.data(), N, y.data(), 2 * C, len);
      rwkv_ref::lerp(x.data(), p.data(), mix.data(), N, want.data(), 2 * C, len);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_TRUE(same_bits_or_nan(y[i], want[i])) << "len " << len << " at " << i;
    }
  }
}

}  // namespace
}  // namespace opal::cpu
