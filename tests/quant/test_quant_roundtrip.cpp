// Round trips and hand-built blocks, checked against the block formats' math.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant/blocks.h"
#include "quant_test_util.h"

using namespace opal;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x, int64_t n_per_row) {
  const auto q = test::quantize_tensor(x, n_per_row, t);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return y;
}

double rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s / double(x.size()));
}

}  // namespace

// Relative RMSE of each quantizer on Gaussian data: an upper bound from the bit
// width (uniform-noise estimate step/sqrt(12) with a generous margin), and more
// bits must never be worse.
TEST(QuantRoundTrip, ErrorShrinksWithBits) {
  const auto x = gaussian(256 * 64, 1);
  struct Case {
    DType t;
    double max_rel;
  } cases[] = {{DType::Q2_K, 0.45},   {DType::Q3_K, 0.25}, {DType::Q4_0, 0.14},  {DType::Q4_1, 0.13},
               {DType::IQ4_NL, 0.12}, {DType::Q4_K, 0.12}, {DType::Q5_0, 0.07},  {DType::Q5_1, 0.07},
               {DType::Q5_K, 0.06},   {DType::Q6_K, 0.03}, {DType::Q8_0, 0.008}, {DType::Q8_K, 0.009},
               {DType::BF16, 0.003},  {DType::F16, 0.0003}};
  const double r = rms(x);
  for (const auto& c : cases) {
    const double rel = test::rmse(x, round_trip(c.t, x, 256)) / r;
    EXPECT_LT(rel, c.max_rel) << dtype_name(c.t);
    EXPECT_GT(rel, 0.0) << dtype_name(c.t);
  }
  auto rel = [&](DType t) { return test::rmse(x, round_trip(t, x, 256)) / r; };
  EXPECT_LT(rel(DType::Q3_K), rel(DType::Q2_K));
  EXPECT_LT(rel(DType::Q4_K), rel(DType::Q3_K));
  EXPECT_LT(rel(DType::Q5_K), rel(DType::Q4_K));
  EXPECT_LT(rel(DType::Q6_K), rel(DType::Q5_K));
  EXPECT_LT(rel(DType::IQ4_NL), rel(DType::Q4_0));  // non-linear levels fit a bell curve better
  EXPECT_EQ(round_trip(DType::F32, x, 256), x);
}

// IQ4_NL: every element within half the widest level gap (24) times |d| of its
// value, unless it lies beyond the outermost level (then within |x - level·d|).
TEST(QuantRoundTrip, Iq4nlErrorBound) {
  const auto x = gaussian(32 * 512, 2, 0.02f);
  const auto q = test::quantize_tensor(x, 32, DType::IQ4_NL);
  std::vector<float> y(x.size());
  dequantize_row(DType::IQ4_NL, q.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    uint16_t dbits;
    std::memcpy(&dbits, q.data() + b * 18, 2);
    const float d = f16_to_f32(dbits);
    ASSERT_NE(d, 0.0f);
    for (size_t j = b * 32; j < b * 32 + 32; ++j) {
      const float lo = std::min(-127 * d, 113 * d), hi = std::max(-127 * d, 113 * d);
      const float clamped = std::clamp(x[j], lo, hi);
      EXPECT_LE(std::fabs(y[j] - x[j]), 12.0f * std::fabs(d) + std::fabs(x[j] - clamped) + 1e-7f) << j;
    }
  }
  // An all-zero block stays exactly zero.
  std::vector<float> zeros(32, 0.0f);
  EXPECT_EQ(round_trip(DType::IQ4_NL, zeros, 32), zeros);
}

// IQ4_XS has no quantizer: dequantize a block built by hand from the format.
TEST(QuantRoundTrip, Iq4xsHandBuiltBlock) {
  quant::BlockIQ4_XS b{};
  const float d = 0.5f;
  b.d = f32_to_f16(d);
  int ls[8];
  for (int ib = 0; ib < 8; ++ib) {
    ls[ib] = (ib * 13 + 5) % 64;  // 6-bit scales, both halves exercised
    b.scales_l[ib / 2] |= uint8_t((ls[ib] & 0xF) << (4 * (ib % 2)));
    b.scales_h |= uint16_t((ls[ib] >> 4) << (2 * ib));
  }
  int idx[256];
  for (int j = 0; j < 256; ++j) idx[j] = (j * 7 + j / 16) % 16;
  for (int ib = 0; ib < 8; ++ib)
    for (int j = 0; j < 16; ++j) b.qs[16 * ib + j] = uint8_t(idx[32 * ib + j] | idx[32 * ib + 16 + j] << 4);
  float y[256];
  dequantize_row(DType::IQ4_XS, &b, y, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], d * float(ls[j / 32] - 32) * float(quant::kIq4nlValues[idx[j]])) << j;
}

// Q8_K (activations for the K-quant dot products): the abs-max element maps to
// -127, every element is within d/2, and bsums are the sums of 16 quants.
TEST(QuantRoundTrip, Q8KBlock) {
  auto x = gaussian(256 * 8, 3, 3.0f);
  x[77] = 20.0f;  // the abs-max of block 0
  std::vector<quant::BlockQ8_K> q(8);
  quantize_rows(DType::Q8_K, x.data(), q.data(), 1, 256 * 8);
  for (int b = 0; b < 8; ++b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[b * 256 + j]) > amax) amax = std::fabs(x[b * 256 + j]), max = x[b * 256 + j];
    EXPECT_NEAR(q[b].d, -max / 127, 1e-6 * amax);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += q[b].qs[16 * g + j];
      EXPECT_EQ(q[b].bsums[g], s);
    }
    for (int j = 0; j < 256; ++j) {
      EXPECT_LE(std::fabs(q[b].d * q[b].qs[j] - x[b * 256 + j]), 0.5f * std::fabs(q[b].d) * 1.0001f);
      EXPECT_GE(q[b].qs[j], -127);
    }
  }
  EXPECT_EQ(q[0].qs[77], -127);
  std::vector<float> y(x.size());
  dequantize_row(DType::Q8_K, q.data(), y.data(), int64_t(y.size()));
  for (size_t j = 0; j < y.size(); ++j) EXPECT_EQ(y[j], q[j / 256].d * float(q[j / 256].qs[j % 256]));
  // All zeros: d = 0 and zero quants.
  std::vector<float> z(256, 0.0f);
  quant::BlockQ8_K qz;
  std::memset(&qz, 0xff, sizeof qz);
  quantize_rows(DType::Q8_K, z.data(), &qz, 1, 256);
  EXPECT_EQ(qz.d, 0.0f);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(qz.qs[j], 0);
}

// Q8_0: |error| <= d/2 per element; extremes are exact multiples.
TEST(QuantRoundTrip, Q8_0HalfStep) {
  const auto x = gaussian(32 * 100, 4);
  const auto q = test::quantize_tensor(x, 32, DType::Q8_0);
  std::vector<float> y(x.size());
  dequantize_row(DType::Q8_0, q.data(), y.data(), int64_t(x.size()));
  for (size_t j = 0; j < x.size(); ++j) {
    uint16_t dbits;
    std::memcpy(&dbits, q.data() + (j / 32) * 34, 2);
    const float d = f16_to_f32(dbits);
    // q was rounded with the f32 scale, then d was rounded to f16 (relative error <= 2^-11).
    EXPECT_LE(std::fabs(y[j] - x[j]), d * (0.5f + 127.0f / 2048.0f) + 1e-6f) << j;
  }
}

TEST(QuantRoundTrip, RejectsBadArguments) {
  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_rows(DType::Q4_0, x.data(), out.data(), 1, 48), Error);     // 48 % 32 != 0
  EXPECT_THROW(quantize_rows(DType::IQ4_XS, x.data(), out.data(), 0, 256), Error);  // no quantizer
  const float w[32] = {1};
  EXPECT_THROW(quantize_rows(DType::Q4_0, x.data(), out.data(), 1, 32, w), Error);  // imatrix not yet
}
