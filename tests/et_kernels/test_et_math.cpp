// test_et_math.cpp - error bounds of backends/et/kernels/et_math.h (division, reciprocal, rsqrt,
// exp, sigmoid/silu, sin/cos without the instructions ET-SoC-1 lacks). The same C is compiled
// for the host here and swept densely against double-precision references; the device build
// (scalar and 8-lane packed) is compared with these host results on sys_emu in
// test_et_math_device.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "backends/et/kernels/et_math.h"

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Distance in units in the last place between a float result and the exact value.
double ulp_error(float got, double exact) {
  const float r = float(exact);
  double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
  return std::fabs(double(got) - exact) / ulp;
}

// Every 257th float in [lo, hi] (bit patterns; positive values).
template <typename F>
void sweep_positive(float lo, float hi, F&& f) {
  uint32_t a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  for (uint32_t u = a; u <= b && u >= a; u += 257) f(from_bits(u));
}

TEST(EtMath, ReciprocalWithinOneUlp) {
  double worst = 0;
  sweep_positive(std::ldexp(1.0f, -125), std::ldexp(1.0f, 125), [&](float x) {
    worst = std::max(worst, ulp_error(et_recipf(x), 1.0 / double(x)));
    worst = std::max(worst, ulp_error(et_recipf(-x), -1.0 / double(x)));
  });
  std::printf("%s: %.3g\n", "worst", worst);
  EXPECT_LE(worst, 1.0);
}

TEST(EtMath, DivisionWithinOneUlp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  std::uniform_int_distribution<int> e(-60, 60);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    float a = std::ldexp(m(rng), e(rng)) * (i & 1 ? -1.0f : 1.0f), b = std::ldexp(m(rng), e(rng));
    worst = std::max(worst, ulp_error(et_divf(a, b), double(a) / double(b)));
  }
  std::printf("%s: %.3g\n", "worst", worst);
  EXPECT_LE(worst, 1.0);
}

TEST(EtMath, RsqrtWithinTwoUlp) {
  double worst = 0;
  sweep_positive(std::ldexp(1.0f, -125), std::ldexp(1.0f, 125),
                 [&](float x) { worst = std::max(worst, ulp_error(et_rsqrtf(x), 1.0 / std::sqrt(double(x)))); });
  std::printf("%s: %.3g\n", "worst", worst);
  EXPECT_LE(worst, 2.0);
}

TEST(EtMath, ExpWithinTwoUlp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.5f; x = std::nextafter(x, 100.0f) + 1.3e-5f)
    worst = std::max(worst, ulp_error(et_expf(x), std::exp(double(x))));
  std::printf("%s: %.3g\n", "worst", worst);
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(et_expf(0.0f), 1.0f);
  EXPECT_LT(et_expf(-1000.0f), 1.2e-38f);  // clamped: a softmax weight of nothing
  EXPECT_GT(et_expf(-1000.0f), 0.0f);
}

TEST(EtMath, SigmoidAndSiluRelativeError) {
  double worst_sig = 0, worst_silu = 0;
  for (float x = -30.0f; x <= 30.0f; x += 1.7e-4f) {
    const double sig = 1.0 / (1.0 + std::exp(-double(x)));
    worst_sig = std::max(worst_sig, std::fabs(et_sigmoidf(x) - sig) / sig);
    if (std::fabs(x) > 1e-3f) worst_silu = std::max(worst_silu, std::fabs(et_siluf(x) - x * sig) / std::fabs(x * sig));
  }
  std::printf("%s: %.3g\n", "worst_sig", worst_sig);
  EXPECT_LE(worst_sig, 4.0e-7);  // exp (2 ulp) + add + reciprocal (1 ulp)
  std::printf("%s: %.3g\n", "worst_silu", worst_silu);
  EXPECT_LE(worst_silu, 5.0e-7);
}

TEST(EtMath, SinCosAbsoluteError) {
  double worst = 0;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> big(-1.0e5f, 1.0e5f);
  for (int i = 0; i < 2000000; ++i) {
    const float x = i < 1000000 ? -8.0f + 16.0f * float(i) / 1.0e6f : big(rng);
    float s, c;
    et_sincosf(x, &s, &c);
    worst = std::max(worst, std::fabs(s - std::sin(double(x))));
    worst = std::max(worst, std::fabs(c - std::cos(double(x))));
  }
  std::printf("%s: %.3g\n", "worst", worst);
  EXPECT_LE(worst, 1.2e-7);
}

}  // namespace
