// test_et_reduce.cpp - SOFTMAX, SUM_ROWS, TOP_K (reduce.c), DIV and SCALE (elementwise.c): the MoE
// router's ops, and CPY, on sys_emu against the CPU backend's own op implementations on the same data.
// Row counts and widths make the harts split rows in line-sized groups (SUM_ROWS: 16 rows per
// 64-byte line of output; TOP_K k = 2: 8 rows; a router's 8-wide softmax: 2 rows), with the
// coherence checker on, so a group that shares a line with another minion fails the launch.
// Tolerances:
//   SCALE: one rounded product on both sides: bit-equal.
//   DIV: et_divf is within 1 ulp of the correctly rounded quotient the CPU computes.
//   SUM_ROWS: the CPU sums in double, the device in 8 fp32 lanes: (n/8 + 16) * 2^-24 * sum |x|.
//   SOFTMAX: the CPU uses llama.cpp's exp and a double sum, the device et_math.h's exp (2 ulp),
//     an fp32 sum ((n + 16) * 2^-24 relative) and a reciprocal (1 ulp): 4 ulp + the sum's bound.
//   TOP_K: exact (indices), ties broken by the lower index on both sides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "backends/cpu/ops/ops.h"
#include "graph/graph.h"
#include "graph/thread_pool.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

Tensor host_f32(void* data, int64_t ne0, int64_t ne1, DType t = DType::F32) {
  Tensor x;
  x.type = t;
  x.ne = {ne0, ne1, 1, 1};
  x.nb = contiguous_strides(t, x.ne);
  x.data = data;
  return x;
}

void run_reduce_on_cpu(const Tensor& node) {
  ThreadPool pool(1);
  std::vector<uint8_t> work(cpu::work_size(node, pool.size()) + 64);
  uint8_t* aligned = work.data() + (64 - reinterpret_cast<uintptr_t>(work.data()) % 64) % 64;
  ASSERT_TRUE(cpu::supports(node).ok) << cpu::supports(node).reason;
  cpu::compute(node, cpu::OpContext{pool, aligned});
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double ulp_of(float x) { return std::ldexp(1.0, std::ilogb(std::max(std::fabs(x), 1e-30f)) - 23); }

// One-source ops (SOFTMAX, SUM_ROWS, SCALE): device and CPU outputs.
struct Unary {
  std::vector<float> got, want;
};

Unary run_unary(Op op, uint32_t kernel, const std::vector<float>& x, int64_t n, int64_t rows, uint32_t minions,
                float scale = 0) {
  const int64_t out_n = op == Op::SumRows ? 1 : n;
  EtDevice dev;
  dev.minion_mask = minions;
  const uint64_t src = dev.upload(x), dst = dev.alloc(uint64_t(out_n * rows) * 4);
  EtRunResult r;
  if (op == Op::Scale) {
    EtScaleArgs a{};
    a.h = dev.header(kernel, sizeof(a));
    a.src = et_tensor(src, ET_TYPE_F32, n, rows);
    a.dst = et_tensor(dst, ET_TYPE_F32, n, rows);
    a.scale = scale;
    r = dev.run("elementwise", a);
  } else {
    EtUnaryArgs a{};
    a.h = dev.header(kernel, sizeof(a));
    a.src = et_tensor(src, ET_TYPE_F32, n, rows);
    a.dst = et_tensor(dst, ET_TYPE_F32, out_n, rows);
    r = dev.run("reduce", a);
  }
  EXPECT_TRUE(r.passed) << r.log;
  std::printf("%s %lldx%lld: %llu cycles on %u harts\n", et_kernel_name(kernel), (long long)n, (long long)rows,
              (unsigned long long)r.cycles, dev.harts());
  Unary u;
  u.got = dev.download<float>(dst, size_t(out_n * rows));
  u.want.assign(size_t(out_n * rows), 0.0f);
  std::vector<float> xs = x;
  Tensor ts = host_f32(xs.data(), n, rows);
  Tensor node = host_f32(u.want.data(), out_n, rows);
  node.op = op;
  node.src[0] = &ts;
  node.fparams[0] = scale;
  run_reduce_on_cpu(node);
  return u;
}

void check_softmax(int64_t n, int64_t rows, uint32_t minions) {
  const auto x = uniform(size_t(n * rows), uint32_t(n + rows), -6.0f, 6.0f);
  const Unary u = run_unary(Op::Softmax, ET_K_SOFTMAX_F32, x, n, rows, minions);
  const double rel = 4 * std::ldexp(1.0, -24) + double(n + 16) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < u.want.size(); ++i)
    ASSERT_LE(std::fabs(double(u.got[i]) - u.want[i]), rel * u.want[i] + 1e-30) << "at " << i;
}

TEST(EtReduce, SoftmaxRouterRows) { check_softmax(8, 37, 0xF); }
TEST(EtReduce, SoftmaxWideRowsWithTail) { check_softmax(1003, 5, 0x3); }

void check_sum_rows(int64_t n, int64_t rows, uint32_t minions) {
  const auto x = uniform(size_t(n * rows), uint32_t(3 * n + rows), -4.0f, 4.0f);
  const Unary u = run_unary(Op::SumRows, ET_K_SUM_ROWS_F32, x, n, rows, minions);
  for (int64_t r = 0; r < rows; ++r) {
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(x[size_t(r * n + i)]));
    const double tol = double(n / 8 + 16) * std::ldexp(1.0, -24) * mag;
    ASSERT_LE(std::fabs(double(u.got[size_t(r)]) - u.want[size_t(r)]), tol) << "row " << r;
  }
}

TEST(EtReduce, SumRowsManyShortRows) { check_sum_rows(2, 53, 0xF); }
TEST(EtReduce, SumRowsLongRowsWithTail) { check_sum_rows(1001, 19, 0x3); }

TEST(EtReduce, ScaleIsBitEqual) {
  const auto x = uniform(size_t(45 * 7), 5, -4.0f, 4.0f);
  const Unary u = run_unary(Op::Scale, ET_K_SCALE_F32, x, 45, 7, 0xF, 0.37f);
  for (size_t i = 0; i < u.want.size(); ++i) ASSERT_EQ(u.got[i], u.want[i]) << "at " << i;
}

// TOP_K: the device's indices equal the CPU's, ties included (rows with repeated values).
void check_top_k(int64_t n, int64_t rows, int k, bool ties) {
  auto x = uniform(size_t(n * rows), uint32_t(n * k), -1.0f, 1.0f);
  if (ties)
    for (auto& v : x) v = std::round(v * 4) / 4;  // 9 distinct values: many equal ones
  EtDevice dev;
  dev.minion_mask = 0xF;
  EtTopKArgs a{};
  a.h = dev.header(ET_K_TOP_K_F32, sizeof(a));
  a.src = et_tensor(dev.upload(x), ET_TYPE_F32, n, rows);
  a.dst = et_tensor(dev.alloc(uint64_t(k * rows) * 4), ET_TYPE_I32, k, rows);
  a.k = k;
  EtRunResult r = dev.run("reduce", a);
  ASSERT_TRUE(r.passed) << r.log;
  auto got = dev.download<int32_t>(a.dst.addr, size_t(k * rows));
  std::vector<int32_t> want(size_t(k * rows));
  Tensor ts = host_f32(x.data(), n, rows);
  Tensor node = host_f32(want.data(), k, rows, DType::I32);
  node.op = Op::TopK;
  node.src[0] = &ts;
  node.iparams[0] = k;
  run_reduce_on_cpu(node);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "at " << i;
}

TEST(EtReduce, TopKRouter) { check_top_k(8, 21, 2, false); }
TEST(EtReduce, TopKTiesByLowerIndex) { check_top_k(64, 6, 8, true); }

// DIV: a / b with b a whole row or one value per row (the router's weights / their sum).
void check_div(int64_t n, int64_t rows, int64_t bn) {
  const auto a = uniform(size_t(n * rows), 7, -4.0f, 4.0f), b = uniform(size_t(bn * rows), 8, 0.25f, 4.0f);
  EtDevice dev;
  dev.minion_mask = 0xF;
  EtBinaryArgs args{};
  args.h = dev.header(ET_K_DIV_F32, sizeof(args));
  args.a = et_tensor(dev.upload(a), ET_TYPE_F32, n, rows);
  args.b = et_tensor(dev.upload(b), ET_TYPE_F32, bn, rows);
  args.dst = et_tensor(dev.alloc(uint64_t(n * rows) * 4), ET_TYPE_F32, n, rows);
  EtRunResult r = dev.run("elementwise", args);
  ASSERT_TRUE(r.passed) << r.log;
  auto got = dev.download<float>(args.dst.addr, size_t(n * rows));
  for (int64_t i1 = 0; i1 < rows; ++i1)
    for (int64_t i0 = 0; i0 < n; ++i0) {
      const float want = a[size_t(i1 * n + i0)] / b[size_t(i1 * bn + (bn == 1 ? 0 : i0))];
      ASSERT_LE(std::fabs(double(got[size_t(i1 * n + i0)]) - want), ulp_of(want)) << "at " << i0 << "," << i1;
    }
}

// CPY: f32 -> f32 is a copy, f32 -> f16 rounds to nearest even as the CPU: bit-equal, specials
// (overflow to inf, f16 subnormals, ties) included.
void check_cpy(DType to, int64_t n, int64_t rows) {
  auto x = uniform(size_t(n * rows), 11, -70000.0f, 70000.0f);
  const float specials[] = {65520.0f, 65519.0f, 1e-6f, -3e-8f, 2.0f + 1.0f / 1024, 0.0f, -0.0f, 1e30f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0] && i < x.size(); ++i) x[i] = specials[i];
  const size_t es = to == DType::F16 ? 2 : 4;
  EtDevice dev;
  dev.minion_mask = 0xF;
  EtUnaryArgs a{};
  a.h = dev.header(ET_K_CPY_F32, sizeof(a));
  a.src = et_tensor(dev.upload(x), ET_TYPE_F32, n, rows);
  a.dst = et_tensor(dev.alloc(uint64_t(n * rows) * es), uint32_t(to), n, rows);
  a.dst.nb[0] = es;
  a.dst.nb[1] = es * uint64_t(n);
  a.dst.nb[2] = a.dst.nb[3] = a.dst.nb[1] * uint64_t(rows);
  EtRunResult r = dev.run("reduce", a);
  ASSERT_TRUE(r.passed) << r.log;
  auto got = dev.download<uint8_t>(a.dst.addr, size_t(n * rows) * es);
  std::vector<uint8_t> want(got.size());
  Tensor ts = host_f32(x.data(), n, rows);
  Tensor node = host_f32(want.data(), n, rows, to);
  node.op = Op::Cpy;
  node.src[0] = &ts;
  run_reduce_on_cpu(node);
  ASSERT_EQ(got, want);
}

TEST(EtReduce, CpyToF16RoundsAsTheCpu) { check_cpy(DType::F16, 37, 11); }
TEST(EtReduce, CpyToF32) { check_cpy(DType::F32, 24, 5); }

TEST(EtReduce, DivByRowSum) { check_div(2, 40, 1); }
TEST(EtReduce, DivSameShape) { check_div(37, 9, 37); }

}  // namespace
}  // namespace opal::et_test
