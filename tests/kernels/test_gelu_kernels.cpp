// The GELU/GEGLU kernels of every ISA the host has (kernels/gelu_kernels.h)
// give exactly the bits of the scalar form (ops/elementwise.cpp's gelu_ref /
// geglu_ref): every f16 code's value, f16 rounding ties (halfway between two
// codes, both parities), the +-10 thresholds, inf, NaN, huge magnitudes,
// subnormals, random values, and row lengths with and without a tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/gelu_kernels.h"
#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/ops/ops.h"
#include "core/fp16.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace {

std::vector<const GeluKernels*> gelu_simd_kernels() {
  std::vector<const GeluKernels*> v;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    if (const GeluKernels* k = gelu_kernels()) v.push_back(k);
  }
  set_isa(before);
  return v;
}

uint32_t gelu_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<float> edge_inputs() {
  std::vector<float> x;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = f16_to_f32(uint16_t(h));
    x.push_back(v);
    if (std::isfinite(v) && std::fabs(v) < 65504.0f) {
      // halfway to the next code up in magnitude (a tie), and one ulp either side of it
      const float next = f16_to_f32(uint16_t(h + 1));
      if (std::isfinite(next)) {
        const float mid = v + (next - v) * 0.5f;
        x.push_back(mid);
        x.push_back(std::nextafter(mid, 0.0f));
        x.push_back(std::nextafter(mid, 100.0f * mid + 1.0f));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {10.0f, -10.0f, std::nextafter(10.0f, 0.0f), std::nextafter(-10.0f, 0.0f), 9.999f, -9.999f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f,
                  65520.0f, -65520.0f, 1e-30f, -1e-30f, std::numeric_limits<float>::denorm_min(), 0.0f, -0.0f})
    x.push_back(v);
  float nan_payload;
  const uint32_t nb = 0x7fa12345u;  // a signalling NaN with payload
  std::memcpy(&nan_payload, &nb, 4);
  x.push_back(nan_payload);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> d(-12.0f, 12.0f);
  for (int i = 0; i < 4096; ++i) x.push_back(d(rng));
  return x;
}

TEST(GeluKernels, GeluEqualsTheScalarFormBitForBit) {
  if (host_supports(Isa::avx2)) {
    ASSERT_FALSE(gelu_simd_kernels().empty());
  }
  const std::vector<float> x = edge_inputs();
  for (const GeluKernels* k : gelu_simd_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(7), int64_t(15), int64_t(17), int64_t(33)}) {
      std::vector<float> y(size_t(n), -1.0f);
      k->gelu_row(gelu_table(), x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gelu_bits(y[size_t(i)]), gelu_bits(gelu_ref(x[size_t(i)])))
            << "n " << n << " x " << x[size_t(i)] << " i " << i;
    }
  }
}

TEST(GeluKernels, GegluEqualsTheScalarFormBitForBit) {
  if (host_supports(Isa::avx2)) {
    ASSERT_FALSE(gelu_simd_kernels().empty());
  }
  const std::vector<float> g = edge_inputs();
  std::vector<float> u(g.size());
  std::mt19937 rng(18);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  for (auto& v : u) v = d(rng);
  // the gate below -10 gives 0 even against inf / NaN; above 10 multiplies those
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < 64; ++i) u[i * 997 % u.size()] = (i % 3 == 0) ? inf : (i % 3 == 1) ? -inf : nan;
  for (const GeluKernels* k : gelu_simd_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : {int64_t(g.size()), int64_t(1), int64_t(9), int64_t(31)}) {
      std::vector<float> y(size_t(n), -1.0f);
      k->geglu_row(gelu_table(), g.data(), u.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gelu_bits(y[size_t(i)]), gelu_bits(geglu_ref(g[size_t(i)], u[size_t(i)])))
            << "n " << n << " g " << g[size_t(i)] << " u " << u[size_t(i)] << " i " << i;
    }
  }
}

TEST(GeluKernels, ScalarFormKeepsTheThresholdsAndTheF16Rounding) {
  EXPECT_EQ(gelu_bits(gelu_ref(-10.0f)), gelu_bits(0.0f));
  EXPECT_EQ(gelu_ref(10.0f), 10.0f);
  EXPECT_EQ(gelu_ref(1e30f), 1e30f);
  EXPECT_EQ(geglu_ref(-11.0f, std::numeric_limits<float>::infinity()), 0.0f);
  // gelu(1) = 0.8411920; its f16 rounding is 0.84130859375
  EXPECT_EQ(gelu_ref(1.0f), f16_to_f32(f32_to_f16(0.841192f)));
  EXPECT_NEAR(gelu_ref(1.0f), 0.841192f, 1e-3f);
}

}  // namespace
}  // namespace opal::cpu
