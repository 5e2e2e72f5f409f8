// test_et_tensor.cpp - the ET-SoC-1 tensor unit on sys_emu, one tile at a time (TEST_TENSOR,
// kernels/test_kernels.c): TensorLoad of A and B lines into the L1 scratchpad, one TensorFMA,
// the 16 x 16 result tile from the f registers, against the same product computed here. The
// launch asks for the scratchpad (split L1); the coherence and L1-scratchpad checkers are on.
// int8 (int32 accumulation) and fp16 (fp32 accumulation, integer-valued data so every partial
// sum is exact) must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/fp16.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

// A: arows lines of 64 bytes; B: k-group lines (int8: 4 k per column, fp16: 2 k per column).
struct Tile {
  std::vector<uint8_t> a = std::vector<uint8_t>(16 * 64), b = std::vector<uint8_t>(16 * 64);
};

std::vector<int32_t> run_tile(const Tile& t, uint32_t type, uint32_t arows, uint32_t kvals, uint32_t aoff,
                              EtRunResult* res, bool scratchpad = true, bool card = false) {
  EtDevice dev;
  dev.card = card;
  dev.scratchpad = scratchpad;
  EtTestTensorArgs a{};
  a.h = dev.header(ET_K_TEST_TENSOR, sizeof(a));
  a.a = dev.upload(t.a);
  a.b = dev.upload(t.b);
  a.out = dev.alloc(1024);
  a.type = type;
  a.arows = arows;
  a.kvals = kvals;
  a.aoff = aoff;
  *res = dev.run("test", a);
  return dev.download<int32_t>(a.out, 256);
}

TEST(EtTensor, Int8TileMatchesTheIntegerProduct) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> q(-128, 127);
  for (uint32_t aoff : {0u, 8u}) {  // A's k = 0..31 at line bytes 0..31, then at 32..63
    Tile t;
    for (auto& v : t.a) v = uint8_t(q(rng));
    for (auto& v : t.b) v = uint8_t(q(rng));
    const uint32_t arows = 16, k = 32;
    EtRunResult r;
    auto c = run_tile(t, 0, arows, k, aoff, &r);
    ASSERT_TRUE(r.passed) << r.log;
    for (uint32_t i = 0; i < arows; ++i)
      for (uint32_t j = 0; j < 16; ++j) {
        int32_t want = 0;
        for (uint32_t kk = 0; kk < k; ++kk)
          want += int32_t(int8_t(t.a[i * 64 + aoff * 4 + kk])) * int32_t(int8_t(t.b[(kk / 4) * 64 + j * 4 + kk % 4]));
        ASSERT_EQ(c[i * 16 + j], want) << "row " << i << " col " << j << " aoff " << aoff;
      }
  }
}

TEST(EtTensor, Int8FullDepthAndFewRows) {
  // k = 64 (16 B lines, the most one FMA takes), 5 A rows: rows >= 5 of the tile are not written
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> q(-128, 127);
  Tile t;
  for (auto& v : t.a) v = uint8_t(q(rng));
  for (auto& v : t.b) v = uint8_t(q(rng));
  EtRunResult r;
  auto c = run_tile(t, 0, 5, 64, 0, &r);
  ASSERT_TRUE(r.passed) << r.log;
  for (uint32_t i = 0; i < 5; ++i)
    for (uint32_t j = 0; j < 16; ++j) {
      int32_t want = 0;
      for (uint32_t kk = 0; kk < 64; ++kk)
        want += int32_t(int8_t(t.a[i * 64 + kk])) * int32_t(int8_t(t.b[(kk / 4) * 64 + j * 4 + kk % 4]));
      ASSERT_EQ(c[i * 16 + j], want) << "row " << i << " col " << j;
    }
}

TEST(EtTensor, Fp16TileMatchesTheProduct) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> q(-8, 8);
  Tile t;
  std::vector<float> af(16 * 32), bf(16 * 32);  // A[i][k], B[k][j] with k < 32
  for (uint32_t i = 0; i < 16; ++i)
    for (uint32_t k = 0; k < 32; ++k) {
      af[i * 32 + k] = float(q(rng));
      const uint16_t h = f32_to_f16(af[i * 32 + k]);
      std::memcpy(&t.a[i * 64 + k * 2], &h, 2);
    }
  for (uint32_t k = 0; k < 32; ++k)
    for (uint32_t j = 0; j < 16; ++j) {
      bf[k * 16 + j] = float(q(rng));
      const uint16_t h = f32_to_f16(bf[k * 16 + j]);
      std::memcpy(&t.b[(k / 2) * 64 + j * 4 + (k % 2) * 2], &h, 2);
    }
  EtRunResult r;
  auto c = run_tile(t, 1, 16, 32, 0, &r);
  ASSERT_TRUE(r.passed) << r.log;
  for (uint32_t i = 0; i < 16; ++i)
    for (uint32_t j = 0; j < 16; ++j) {
      float want = 0;
      for (uint32_t k = 0; k < 32; ++k) want += af[i * 32 + k] * bf[k * 16 + j];
      float got;
      std::memcpy(&got, &c[i * 16 + j], 4);
      ASSERT_EQ(got, want) << "row " << i << " col " << j;
    }
}

TEST(EtTensor, WithoutTheScratchpadTheTensorErrorIsReported) {
  // a launch that did not ask for the scratchpad: TensorLoad and TensorFMA do nothing but set
  // tensor_error bit 4, which the kernel returns (the host then names the hart and the status)
  Tile t;
  EtRunResult r;
  run_tile(t, 0, 16, 32, 0, &r, false);
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.launch.device_status, uint32_t(ET_STATUS_TENSOR_ERROR)) << r.log;
  EXPECT_NE(r.launch.device_detail & (1u << 4), 0u) << r.log;
  // and the next launch with the scratchpad works on the same chip
  auto c = run_tile(t, 0, 16, 32, 0, &r);
  EXPECT_TRUE(r.passed) << r.log;
}

// A card's launch (the etrt driver): the firmware only splits the L1, and the blob's header asks
// the kernel entry to turn the scratchpad on (card_launch_blob: ET_ARGS_SCP_ON_ENTRY, set for
// scratchpad launches only; a blob shorter than a header is refused naming the kernel).
TEST(EtTensor, CardLaunchBlobAsksTheKernelForTheScratchpad) {
  et::LaunchRequest rq;
  rq.kernel = "mul_mat_tu_f16";
  EtArgsHeader h{};
  h.abi_version = ET_ABI_VERSION;
  h.kernel_id = ET_K_MUL_MAT_TU_F16;
  rq.args.resize(sizeof(EtMulMatArgs));
  std::memcpy(rq.args.data(), &h, sizeof h);
  EXPECT_EQ(et::card_launch_blob(rq), rq.args);  // no scratchpad: the blob as it is
  rq.scratchpad = true;
  const std::vector<uint8_t> b = et::card_launch_blob(rq);
  ASSERT_EQ(b.size(), rq.args.size());
  EtArgsHeader got;
  std::memcpy(&got, b.data(), sizeof got);
  EXPECT_EQ(got.flags, uint32_t(ET_ARGS_SCP_ON_ENTRY));
  EXPECT_EQ(got.kernel_id, uint32_t(ET_K_MUL_MAT_TU_F16));
  EXPECT_TRUE(std::equal(b.begin() + sizeof got, b.end(), rq.args.begin() + sizeof got));  // the rest unchanged
  rq.args.resize(16);
  try {
    et::card_launch_blob(rq);
    ADD_FAILURE() << "a 16-byte blob was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mul_mat_tu_f16'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos) << e.what();
  }
}

// The same tiles on the emulator set up as a card: D1Split only from the driver, the scratchpad
// turned on by the kernel entry (dispatch.c) and off after it (coherence checker off:
// sysemu_card_driver); a second launch on the same minions works (the entry's enabling is not a
// second one), and without the request the tensor unit reports the missing scratchpad.
TEST(EtTensor, TilesWorkWhenTheKernelEntryTurnsTheScratchpadOn) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> q(-128, 127);
  Tile t;
  for (auto& v : t.a) v = uint8_t(q(rng));
  for (auto& v : t.b) v = uint8_t(q(rng));
  EtRunResult r1, r2, r3;
  const auto want = run_tile(t, 0, 16, 32, 0, &r1);
  ASSERT_TRUE(r1.passed) << r1.log;
  const auto c1 = run_tile(t, 0, 16, 32, 0, &r2, true, true);
  ASSERT_TRUE(r2.passed) << r2.log;
  EXPECT_EQ(c1, want);
  const auto c2 = run_tile(t, 0, 16, 32, 0, &r3, true, true);
  ASSERT_TRUE(r3.passed) << r3.log;
  EXPECT_EQ(c2, want);
  // without a scratchpad request the card driver splits nothing and the kernel enables nothing
  run_tile(t, 0, 16, 32, 0, &r3, false, true);
  ASSERT_FALSE(r3.passed);
  EXPECT_EQ(r3.launch.device_status, uint32_t(ET_STATUS_TENSOR_ERROR)) << r3.log;
}

}  // namespace
}  // namespace opal::et_test
