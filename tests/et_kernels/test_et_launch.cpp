// test_et_launch.cpp - the launch contract on the emulator: the embedded images, a kernel's
// failure status, a trap on an instruction ET-SoC-1 lacks, an access fault and an unknown kernel
// id each end the launch with the failing hart, the status and (for traps) mcause, read by the
// driver from the boot stub's hart records.
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
  EXPECT_EQ(r.launch.status, et::LaunchStatus::KernelFailed) << r.log;
  EXPECT_EQ(r.launch.hart, 2) << r.log;
  EXPECT_EQ(r.launch.device_status, uint32_t(ET_STATUS_BAD_SHAPE)) << r.log;
  EXPECT_EQ(r.launch.device_detail, 42u) << r.log;
}

TEST(EtLaunch, UnimplementedInstructionTraps) {
  EtRunResult r = run_fault(1, 3);  // fence.i: mcause 30 like fdiv.s
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.launch.status, et::LaunchStatus::Trap) << r.log;
  EXPECT_EQ(r.launch.hart, 3) << r.log;
  EXPECT_EQ(r.launch.mcause, uint64_t(ET_MCAUSE_NOT_IMPLEMENTED)) << r.log;
}

TEST(EtLaunch, AccessFaultTraps) {
  EtRunResult r = run_fault(2, 0);  // load from the M-mode-only region: mcause 5
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.launch.status, et::LaunchStatus::Trap) << r.log;
  EXPECT_EQ(r.launch.hart, 0) << r.log;
  EXPECT_EQ(r.launch.mcause, 5u) << r.log;
}

TEST(EtLaunch, UnknownKernelIdFails) {
  EtDevice dev;
  EtTestFaultArgs a{};
  a.h = dev.header(ET_K_ATTENTION_F16, sizeof(a));  // not in the "elementwise" image
  EtRunResult r = dev.run("elementwise", a);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.launch.device_status, uint32_t(ET_STATUS_NO_KERNEL)) << r.log;
  EXPECT_EQ(r.launch.device_detail, uint32_t(ET_K_ATTENTION_F16)) << r.log;
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
