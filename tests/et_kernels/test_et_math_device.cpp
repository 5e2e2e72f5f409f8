// test_et_math_device.cpp - the et_math.h helpers as built for the device (rv64imf, scalar and
// 8-lane packed) on sys_emu: every result must equal the host build of the same C bit for bit
// (the host build's error bounds are test_et_math.cpp's), which also shows that the packed
// versions (.ps instructions) run exactly the scalar steps.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/et/kernels/et_math.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

float host_fn(uint32_t fn, float x, float y) {
  float s, c;
  switch (fn) {
    case ET_MATH_RECIP: return et_recipf(x);
    case ET_MATH_RSQRT: return et_rsqrtf(x);
    case ET_MATH_EXP: return et_expf(x);
    case ET_MATH_SIGMOID: return et_sigmoidf(x);
    case ET_MATH_SILU: return et_siluf(x);
    case ET_MATH_SIN: et_sincosf(x, &s, &c); return s;
    case ET_MATH_COS: et_sincosf(x, &s, &c); return c;
    default: return et_divf(x, y);
  }
}

TEST(EtMathDevice, ScalarAndPackedEqualHostBuild) {
  // Inputs spanning each function's domain: wide magnitudes (positive for rsqrt), and the
  // clamping ranges of exp / sigmoid.
  const int n = 256;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> wide(-90.0f, 90.0f), mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-100, 100);
  std::vector<float> x(n), pos(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[size_t(i)] = wide(rng);
    pos[size_t(i)] = std::ldexp(mant(rng), ex(rng));
    y[size_t(i)] = std::ldexp(mant(rng), ex(rng) / 4) * (i % 3 ? 1.0f : -1.0f);
  }
  // One launch, every case (fn = ET_MATH_FN_COUNT): row r < 9 scalar function r, rows 9-11
  // packed exp, reciprocal, silu; rsqrt and reciprocal rows get positive inputs.
  const int rows = 12;
  auto fn_of = [](int r) {
    return r < 9 ? uint32_t(r) : uint32_t(r == 9 ? ET_MATH_EXP : r == 10 ? ET_MATH_RECIP : ET_MATH_SILU);
  };
  std::vector<float> in(size_t(n * rows)), in2(size_t(n * rows));
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) {
      const uint32_t fn = fn_of(r);
      in[size_t(r * n + i)] = (fn == ET_MATH_RSQRT || fn == ET_MATH_RECIP) ? pos[size_t(i)] : x[size_t(i)];
      in2[size_t(r * n + i)] = y[size_t(i)];
    }
  EtDevice dev;
  dev.minion_mask = 0xF;
  EtTestMathArgs a{};
  a.h = dev.header(ET_K_TEST_MATH, sizeof(a));
  a.src = et_tensor(dev.upload(in), ET_TYPE_F32, n, rows);
  a.src2 = et_tensor(dev.upload(in2), ET_TYPE_F32, n, rows);
  a.dst = et_tensor(dev.alloc(uint64_t(n * rows) * 4), ET_TYPE_F32, n, rows);
  a.fn = ET_MATH_FN_COUNT;
  EtRunResult r = dev.run("test", a);
  ASSERT_TRUE(r.passed) << r.log;
  auto out = dev.download<float>(a.dst.addr, size_t(n * rows));
  for (int row = 0; row < rows; ++row)
    for (int i = 0; i < n; ++i) {
      const size_t k = size_t(row * n + i);
      const float want = host_fn(fn_of(row), in[k], in2[k]);
      ASSERT_EQ(std::memcmp(&out[k], &want, 4), 0)
          << "row " << row << " (fn " << fn_of(row) << ", packed " << (row >= 9) << ") x " << in[k] << ": device "
          << out[k] << " host " << want;
    }
}

}  // namespace
}  // namespace opal::et_test
