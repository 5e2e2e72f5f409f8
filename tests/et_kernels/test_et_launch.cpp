// test_et_launch.cpp - the launch contract on sys_emu: the embedded images, a kernel's failure
// status, a trap on an instruction ET-SoC-1 lacks, an access fault and an unknown kernel id
// each stop the run with a line naming the hart, the status and (for traps) mcause/mepc.
#include <gtest/gtest.h>

#include "backends/et/kernels/et_kernel_images.h"
#include "sysemu_runner.h"

namespace opal::et_test {
namespace {

TEST(EtLaunch, ImagesAreEmbedded) {
  ASSERT_EQ(et::et_kernels_unavailable_reason(), "");
  for (const char* name : {"boot", "all", "test", "elementwise"}) {
    auto img = et::et_kernel_image(name);
    ASSERT_GT(img.size(), 64u) << name;
    EXPECT_EQ(img[0], 0x7f) << name;  // ELF magic
    EXPECT_EQ(img[1], 'E') << name;
  }
  EXPECT_TRUE(et::et_kernel_image("no-such-image").empty());
}

EtRunResult run_fault(uint32_t mode, uint32_t rank) {
  EtDevice dev;
  dev.minion_mask = 0x3;  // 4 harts
  EtTestFaultArgs a{};
  a.h = dev.header(ET_K_TEST_FAULT, sizeof(a));
  a.rank = rank;
  a.mode = mode;
  a.status = ET_STATUS_BAD_SHAPE;
  a.detail = 42;
  return dev.run("test", a);
}

TEST(EtLaunch, KernelFailureNamesHartAndStatus) {
  EtRunResult r = run_fault(0, 2);  // rank 2 = shire 0, minion 1, thread 0 = hart 2
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.log.find("et-fail: hart 0x2 status 0x4 detail 0x2a"), std::string::npos) << r.log;
}

TEST(EtLaunch, UnimplementedInstructionTraps) {
  EtRunResult r = run_fault(1, 3);  // fence.i: mcause 30 like fdiv.s
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.log.find("et-fail: hart 0x3 status 0x7 detail 0x0 mcause 0x1e"), std::string::npos) << r.log;
}

TEST(EtLaunch, AccessFaultTraps) {
  EtRunResult r = run_fault(2, 0);  // load from the M-mode-only region: mcause 5
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.log.find("et-fail: hart 0x0 status 0x7 detail 0x0 mcause 0x5"), std::string::npos) << r.log;
}

TEST(EtLaunch, UnknownKernelIdFails) {
  EtDevice dev;
  EtTestFaultArgs a{};
  a.h = dev.header(ET_K_ATTENTION_F16, sizeof(a));  // not in the "elementwise" image
  EtRunResult r = dev.run("elementwise", a);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.log.find("status 0x2 detail 0x32"), std::string::npos) << r.log;
}

TEST(EtLaunch, AllHartsOfAShireRun) {
  EtDevice dev;
  dev.minion_mask = 0xFFFFFFFF;
  EtTestFaultArgs a{};
  a.h = dev.header(ET_K_TEST_FAULT, sizeof(a));
  a.rank = 1000;  // nobody fails
  EtRunResult r = dev.run("test", a);
  EXPECT_TRUE(r.passed) << r.log;
  EXPECT_GT(r.cycles, 0u);
}

}  // namespace
}  // namespace opal::et_test
