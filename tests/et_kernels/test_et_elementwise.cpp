// test_et_elementwise.cpp - ADD / MUL kernels on sys_emu against the CPU's definition
// (graph Op::Add / Op::Mul: F32, src1 broadcast by modulo in each dim). One fp32 add or
// multiply per element, rounded to nearest even on both sides: the results must be bit-equal.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void check_binary(uint32_t kernel, int64_t ne0, int64_t ne1, int64_t bne0, int64_t bne1, uint32_t minions,
                  uint32_t threads) {
  EtDevice dev;
  dev.minion_mask = minions;
  dev.threads = threads;
  auto a = random_floats(size_t(ne0 * ne1), 1), b = random_floats(size_t(bne0 * bne1), 2);
  EtBinaryArgs args{};
  args.h = dev.header(kernel, sizeof(args));
  args.a = et_tensor(dev.upload(a), ET_TYPE_F32, ne0, ne1);
  args.b = et_tensor(dev.upload(b), ET_TYPE_F32, bne0, bne1);
  args.dst = et_tensor(dev.alloc(size_t(ne0 * ne1) * 4), ET_TYPE_F32, ne0, ne1);
  EtRunResult r = dev.run("elementwise", args);
  ASSERT_TRUE(r.passed) << r.log;
  std::printf("%s %lldx%lld: %llu cycles on %u harts\n", et_kernel_name(kernel), (long long)ne0, (long long)ne1,
              (unsigned long long)r.cycles, dev.harts());
  auto out = dev.download<float>(args.dst.addr, size_t(ne0 * ne1));
  for (int64_t i1 = 0; i1 < ne1; ++i1)
    for (int64_t i0 = 0; i0 < ne0; ++i0) {
      float x = a[size_t(i1 * ne0 + i0)], y = b[size_t((i1 % bne1) * bne0 + (i0 % bne0))];
      float want = kernel == ET_K_ADD_F32 ? x + y : x * y;
      ASSERT_EQ(out[size_t(i1 * ne0 + i0)], want) << "at " << i0 << "," << i1;
    }
}

TEST(EtElementwise, AddSameShape) { check_binary(ET_K_ADD_F32, 64, 12, 64, 12, 0x3, 2); }
TEST(EtElementwise, AddBroadcastRowAndOddWidth) { check_binary(ET_K_ADD_F32, 37, 9, 37, 1, 0xF, 2); }
TEST(EtElementwise, MulBroadcastScalarColumn) { check_binary(ET_K_MUL_F32, 48, 5, 1, 5, 0x3, 1); }

}  // namespace
}  // namespace opal::et_test
