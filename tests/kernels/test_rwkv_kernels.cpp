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
        for (size_t i = 0; i < st.size(); ++i) ASSERT_TRUE(same_bits_or_nan(st[i], st_ref[i])) << "S " << S << " state " << i;
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

}  // namespace
}  // namespace opal::cpu
