// The SILU/SWIGLU kernels of every ISA the host has (kernels/silu_kernels.h)
// give exactly the bits of the scalar form, llama_order::silu_at (the
// polynomial exp on a row's whole 16-element chunks, the C library's on the
// tail): every f16 code's value, the exp's range ends (|x| near 87-88 and 133,
// where the polynomial's 2^n leaves the normal range), inf, NaN, huge
// magnitudes, subnormals, random values, and rows with and without a tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/silu_kernels.h"
#include "core/fp16.h"
#include "support/isa_coverage.h"

namespace opal::cpu {
namespace {

std::vector<const SiluKernels*> silu_simd_kernels() {
  std::vector<const SiluKernels*> v;
  const Isa before = selected_isa();
  for (Isa isa : test::covered_isas([](const std::string& m) { ADD_FAILURE() << m; })) {
    set_isa(isa);
    if (const SiluKernels* k = silu_kernels()) v.push_back(k);
  }
  set_isa(before);
  return v;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<float> inputs() {
  std::vector<float> x;
  for (uint32_t h = 0; h < 65536; ++h) x.push_back(f16_to_f32(uint16_t(h)));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {87.0f, 87.5f, 88.0f, 88.7f, 89.0f, 103.0f, 104.0f, 133.0f, 133.5f, 134.0f, 200.0f})
    for (float s : {1.0f, -1.0f}) x.push_back(s * v);
  for (float v : {inf, -inf, nan, -nan, 1e30f, -1e30f, 1e-30f, -1e-30f, std::numeric_limits<float>::denorm_min(), 0.0f,
                  -0.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(v);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> wide(-140.0f, 140.0f), narrow(-8.0f, 8.0f);
  for (int i = 0; i < 4096; ++i) x.push_back(wide(rng));
  for (int i = 0; i < 4096; ++i) x.push_back(narrow(rng));
  return x;
}

std::vector<int64_t> row_lengths(int64_t all) { return {all, all - 5, 1, 7, 8, 15, 16, 17, 31, 33, 48}; }

TEST(SiluKernels, SiluEqualsTheScalarFormBitForBit) {
  if (host_supports(Isa::avx2)) {
    ASSERT_FALSE(silu_simd_kernels().empty());
  }
  const std::vector<float> x = inputs();
  int checked = 0;
  for (const SiluKernels* k : silu_simd_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : row_lengths(int64_t(x.size()))) {
      std::vector<float> y(size_t(n), -1.0f);
      k->silu_row(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bits(y[size_t(i)]), bits(llama_order::silu_at(x[size_t(i)], i, n)))
            << "n " << n << " x " << x[size_t(i)] << " i " << i << ": " << y[size_t(i)];
      ++checked;
    }
  }
  if (host_supports(Isa::avx2)) {
    EXPECT_GT(checked, 0);
  }
}

TEST(SiluKernels, SwigluEqualsTheScalarFormBitForBit) {
  if (host_supports(Isa::avx2)) {
    ASSERT_FALSE(silu_simd_kernels().empty());
  }
  const std::vector<float> g = inputs();
  std::vector<float> u(g.size());
  std::mt19937 rng(24);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  for (auto& v : u) v = d(rng);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < 64; ++i) u[i * 997 % u.size()] = (i % 3 == 0) ? inf : (i % 3 == 1) ? -inf : nan;
  for (const SiluKernels* k : silu_simd_kernels()) {
    SCOPED_TRACE(k->name);
    for (int64_t n : row_lengths(int64_t(g.size()))) {
      std::vector<float> y(size_t(n), -1.0f);
      k->swiglu_row(g.data(), u.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float silu = llama_order::silu_at(g[size_t(i)], i, n);
        // A product of two NaNs is one of them, which one is the order the compiler gave the operands (x86
        // returns the first source's): there only the NaN is asserted, everywhere else the bits.
        if (std::isnan(silu) && std::isnan(u[size_t(i)]))
          ASSERT_TRUE(std::isnan(y[size_t(i)])) << "n " << n << " i " << i << ": " << y[size_t(i)];
        else
          ASSERT_EQ(bits(y[size_t(i)]), bits(silu * u[size_t(i)]))
              << "n " << n << " g " << g[size_t(i)] << " u " << u[size_t(i)] << " i " << i;
      }
    }
  }
}

// The polynomial and the C library differ somewhere, so the chunk / tail split is visible: a kernel that ran the
// polynomial on the tail (or the library on the body) would fail the tests above.
TEST(SiluKernels, ThePolynomialAndTheLibraryDifferSomewhere) {
  int differ = 0;
  for (float x : inputs())
    if (std::isfinite(x) && bits(llama_order::silu_avx512(x)) != bits(llama_order::silu_libm(x))) ++differ;
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace opal::cpu
