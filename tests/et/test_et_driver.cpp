// The ET driver seam (backends/et/driver): the fake driver's contract
// (allocation, copies, argument blobs, injected faults) and the in-process
// sysemu driver on real RISC-V code (tests/et/kernels/driver_probe.c): a
// kernel that works, traps, runs past its budget, reports failure or breaks
// coherence must come back as a result naming kernel and hart, never a hang
// or an exit, and device memory must survive the fault.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "backends/et/driver/driver.h"
#include "backends/et/driver/elf_image.h"
#include "backends/et/driver/fake/fake_driver.h"
#include "support/test_support.h"

using namespace opal;
using namespace opal::et;
using namespace opal::test;

namespace {

struct ProbeArgs {
  uint32_t mode = 0, target = 0;
  uint32_t n = 0, pad = 0;
  uint64_t in = 0, out = 0, flag = 0;
};
static_assert(sizeof(ProbeArgs) == 40);

std::vector<uint8_t> blob(const ProbeArgs& a) {
  std::vector<uint8_t> b(sizeof a);
  std::memcpy(b.data(), &a, sizeof a);
  return b;
}

bool have_driver(const std::string& name) {
  for (const auto& d : available_drivers())
    if (d.name == name) return d.available;
  return false;
}

}  // namespace

TEST(EtFakeDriver, AllocationsAreAlignedZeroedAndChecked) {
  FakeDriver d;
  DevAddr a = d.alloc(100);
  DevAddr b = d.alloc(1000, 4096);
  EXPECT_EQ(a % 64, 0u);
  EXPECT_EQ(b % 4096, 0u);
  EXPECT_GE(a, 0x8000000000ull);
  std::vector<uint8_t> z(128, 0xAA);
  d.copy_out(a, z.data(), 128);  // padded to whole lines, zeroed
  for (uint8_t v : z) EXPECT_EQ(v, 0);
  std::vector<uint8_t> src(100);
  for (size_t i = 0; i < src.size(); i++) src[i] = uint8_t(i * 7);
  d.copy_in(a, src.data(), src.size());
  std::vector<uint8_t> back(100);
  d.copy_out(a, back.data(), back.size());
  EXPECT_EQ(src, back);
  expect_error([&] { d.copy_in(a + 64, src.data(), 100); }, {"copy_in", "not inside one allocation"});
  expect_error([&] { d.free(a + 64); }, "not an allocation");
  expect_error([&] { d.alloc(10, 100); }, "power of two");
  d.free(a);
  d.free(b);
  EXPECT_EQ(d.live_allocations(), 0u);
  FakeDriver small(HartSet{}, 1 << 20);
  expect_error([&] { small.alloc(2 << 20); }, "out of device memory");
}

TEST(EtFakeDriver, KernelsSeeTheBlobAndDeviceMemory) {
  FakeDriver d;
  d.add_kernel("probe", [](FakeLaunch& l) {
    auto a = l.arg<ProbeArgs>(0);
    auto* in = reinterpret_cast<int32_t*>(l.mem(a.in, a.n * 4));
    auto* out = reinterpret_cast<int32_t*>(l.mem(a.out, a.n * 4));
    for (uint32_t i = 0; i < a.n; i++) out[i] = in[i] * 3 + int32_t(a.target);
    return LaunchResult{};
  });
  CodeId id = d.load_code("probe", {});
  EXPECT_EQ(d.load_code("probe", {}), id);
  expect_error([&] { d.load_code("nothing", {}); }, {"'nothing'", "no host model"});
  ProbeArgs a;
  a.n = 32;
  a.target = 5;
  a.in = d.alloc(128);
  a.out = d.alloc(128);
  std::vector<int32_t> in(32);
  for (int i = 0; i < 32; i++) in[i] = i - 10;
  d.copy_in(a.in, in.data(), 128);
  LaunchResult r = d.run({id, "probe_k", HartSet{1, 1, 1}, blob(a)});
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.kernel, "probe_k");
  std::vector<int32_t> out(32);
  d.copy_out(a.out, out.data(), 128);
  for (int i = 0; i < 32; i++) EXPECT_EQ(out[i], (i - 10) * 3 + 5);
  expect_error([&] { d.launch({id, "probe_k", HartSet{0x3, 1, 1}, blob(a)}); }, "outside the device");
  expect_error([&] { d.launch({7, "probe_k", HartSet{}, blob(a)}); }, "never loaded");
}

TEST(EtFakeDriver, InjectedFaultsNameKernelAndHartAndDropTheQueue) {
  FakeDriver d;
  int runs = 0;
  d.add_kernel("k", [&](FakeLaunch&) {
    runs++;
    return LaunchResult{};
  });
  CodeId id = d.load_code("k", {});
  LaunchResult trap;
  trap.status = LaunchStatus::Trap;
  trap.hart = 67;
  trap.mcause = 30;
  trap.mepc = 0x8005801234;
  d.inject_fault("k", trap);
  d.launch({id, "rms_norm_f32", HartSet{}, {}});
  d.launch({id, "second", HartSet{}, {}});
  LaunchResult r = d.wait();
  EXPECT_EQ(r.status, LaunchStatus::Trap);
  EXPECT_EQ(runs, 0);  // the second launch was dropped with the queue
  std::string s = r.describe();
  EXPECT_NE(s.find("'rms_norm_f32'"), std::string::npos) << s;
  EXPECT_NE(s.find("hart 67 (shire 1, minion 1, thread 1)"), std::string::npos) << s;
  EXPECT_NE(s.find("mcause 30 (instruction ET-SoC-1 does not implement"), std::string::npos) << s;
  EXPECT_TRUE(d.run({id, "again", HartSet{}, {}}).ok());
  EXPECT_EQ(runs, 1);
}

TEST(EtDriver, ElfImagesAreChecked) {
  std::vector<uint8_t> junk(100, 1);
  expect_error([&] { parse_elf("add_f32", junk); }, {"'add_f32'", "not an ELF"});
  EXPECT_TRUE(have_driver("fake"));
  for (const auto& d : available_drivers()) {
    if (!d.available) {
      EXPECT_NE(d.reason.find("not built"), std::string::npos) << d.name;
    }
  }
  DriverOptions o;
  o.kind = "nope";
  expect_error([&] { open_driver(o); }, "unknown driver 'nope'");
}

#ifdef OPAL_ET_TEST_KERNELS
class EtSysemuDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_driver("sysemu")) GTEST_SKIP() << "this build has no sysemu driver (no sw-sysemu at configure time)";
    image_ = read_bytes(std::string(OPAL_ET_TEST_KERNELS) + "/driver_probe.elf");
    DriverOptions o;
    o.kind = "sysemu";
    o.harts = HartSet{0x1, 0xF, 2};  // 1 shire x 4 minions x 2 threads: 8 harts
    drv_ = open_driver(o);
    code_ = drv_->load_code("driver_probe", image_);
  }
  LaunchResult run(const ProbeArgs& a, uint64_t budget = 2000000, HartSet h = HartSet{0x1, 0xF, 2}) {
    auto t0 = std::chrono::steady_clock::now();
    LaunchResult r = drv_->run({code_, "probe_mode" + std::to_string(a.mode), h, blob(a), budget});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
    return r;
  }
  // mode 0 over n int32 on the 8 harts; checks the output.
  void check_scale(uint32_t n, int seed) {
    ProbeArgs a;
    a.mode = 0;
    a.target = 8;
    a.n = n;
    a.in = drv_->alloc(n * 4);
    a.out = drv_->alloc(n * 4);
    std::vector<int32_t> in(n), out(n);
    for (uint32_t i = 0; i < n; i++) in[i] = int32_t(i * 31 + seed) - 1000;
    drv_->copy_in(a.in, in.data(), n * 4);
    LaunchResult r = run(a);
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_GT(r.cycles, 0u);
    EXPECT_EQ(r.harts, 8u);
    drv_->copy_out(a.out, out.data(), n * 4);
    for (uint32_t i = 0; i < n; i++) ASSERT_EQ(out[i], in[i] * 3 + 8) << i;
    drv_->free(a.in);
    drv_->free(a.out);
  }
  std::vector<uint8_t> image_;
  std::unique_ptr<Driver> drv_;
  CodeId code_ = 0;
};

TEST_F(EtSysemuDriver, RunsAndRelaunches) {
  check_scale(1024, 1);
  check_scale(4096, 2);  // relaunch: the checker's directory is reset, no false hazard
}

TEST_F(EtSysemuDriver, TrapNamesKernelHartAndCauseAndMemorySurvives) {
  DevAddr keep = drv_->alloc(256);
  std::vector<uint8_t> pattern(256);
  for (size_t i = 0; i < pattern.size(); i++) pattern[i] = uint8_t(i ^ 0x5A);
  drv_->copy_in(keep, pattern.data(), pattern.size());
  ProbeArgs a;
  a.mode = 1;
  a.target = 3;
  LaunchResult r = run(a);
  EXPECT_EQ(r.status, LaunchStatus::Trap) << r.describe();
  EXPECT_EQ(r.hart, 3);
  EXPECT_EQ(r.mcause, 30u);
  EXPECT_NE(r.describe().find("kernel 'probe_mode1': trap on hart 3"), std::string::npos) << r.describe();
  // The next launch runs on a fresh chip with device memory carried over.
  check_scale(512, 3);
  std::vector<uint8_t> back(256);
  drv_->copy_out(keep, back.data(), back.size());
  EXPECT_EQ(back, pattern);
}

TEST_F(EtSysemuDriver, EndlessKernelStopsAtItsBudget) {
  ProbeArgs a;
  a.mode = 2;
  LaunchResult r = run(a, 20000);
  EXPECT_EQ(r.status, LaunchStatus::Timeout) << r.describe();
  EXPECT_GE(r.hart, 0);
  EXPECT_NE(r.describe().find("past its cycle budget after 20001 cycles"), std::string::npos) << r.describe();
  check_scale(256, 4);
}

TEST_F(EtSysemuDriver, KernelReportedFailureNamesTheHart) {
  ProbeArgs a;
  a.mode = 3;
  a.target = 6;
  LaunchResult r = run(a);
  EXPECT_EQ(r.status, LaunchStatus::KernelFailed) << r.describe();
  EXPECT_EQ(r.hart, 6);
}

TEST_F(EtSysemuDriver, CoherenceCheckerCatchesAMissingEvict) {
  ProbeArgs a;
  a.mode = 4;
  a.target = 6;  // minion 3, thread 0: another minion than the producer (hart 0)
  a.out = drv_->alloc(64);
  a.flag = drv_->alloc(64);
  LaunchResult r = run(a);
  EXPECT_EQ(r.status, LaunchStatus::Coherence) << r.describe();
  EXPECT_EQ(r.hart, 6);
  EXPECT_EQ(r.address, a.out);
  EXPECT_NE(r.describe().find("coherence hazard: hart 6"), std::string::npos) << r.describe();
  // The same handoff with the producer's evict passes.
  std::vector<uint8_t> zero(64, 0);
  drv_->copy_in(a.flag, zero.data(), 64);
  drv_->copy_in(a.out, zero.data(), 64);
  a.mode = 5;
  LaunchResult ok = run(a);
  EXPECT_TRUE(ok.ok()) << ok.describe();
}

TEST_F(EtSysemuDriver, MisuseIsAnErrorNotACrash) {
  ProbeArgs a;
  expect_error([&] { drv_->launch({code_, "k", HartSet{0x3, 0xF, 2}, blob(a)}); }, "outside the emulated chip");
  expect_error(
      [&] {
        drv_->launch({code_, "k", HartSet{0x1, 0xF, 2}, std::vector<uint8_t>(100000)});
      },
      "argument blob");
  DevAddr x = drv_->alloc(64);
  std::vector<uint8_t> buf(128);
  expect_error([&] { drv_->copy_out(x, buf.data(), 128); }, "not inside one allocation");
  std::vector<uint8_t> bad = image_;
  bad[18] = 62;  // x86-64
  expect_error([&] { drv_->load_code("x86_kernel", bad); }, {"'x86_kernel'", "not RISC-V"});
}
#endif

// The ABI path: the boot stub (backends/et/kernels/boot) and the "test" image's fault kernel.
#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/kernels/et_kernel_images.h"

class EtSysemuAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_driver("sysemu")) GTEST_SKIP() << "this build has no sysemu driver (no sw-sysemu at configure time)";
    if (et_kernel_image("test").empty()) GTEST_SKIP() << "no ET kernel images: " << et_kernels_unavailable_reason();
    DriverOptions o;
    o.harts = HartSet{0x1, 0xF, 2};
    drv_ = open_driver(o);
    code_ = drv_->load_code("test", et_kernel_image("test"));
  }
  LaunchResult fault(uint32_t rank, uint32_t mode, uint32_t status = 0, uint32_t detail = 0) {
    EtTestFaultArgs a{};
    a.h.abi_version = ET_ABI_VERSION;
    a.h.kernel_id = ET_K_TEST_FAULT;
    a.h.shire_mask = 0x1;
    a.h.minion_mask = 0xF;
    a.h.threads = 2;
    a.h.blob_bytes = sizeof a;
    a.rank = rank;
    a.mode = mode;
    a.status = status;
    a.detail = detail;
    std::vector<uint8_t> b(sizeof a);
    std::memcpy(b.data(), &a, sizeof a);
    return drv_->run({code_, "test_fault", HartSet{0x1, 0xF, 2}, b, 5000000});
  }
  std::unique_ptr<Driver> drv_;
  CodeId code_ = 0;
};

TEST_F(EtSysemuAbi, HartRecordsNameTheFailingHartStatusAndTrap) {
  LaunchResult r = fault(5, 0, ET_STATUS_BAD_SHAPE, 2);
  EXPECT_EQ(r.status, LaunchStatus::KernelFailed) << r.describe();
  EXPECT_EQ(r.hart, 5);
  EXPECT_EQ(r.device_status, unsigned(ET_STATUS_BAD_SHAPE));
  EXPECT_EQ(r.device_detail, 2u);
  EXPECT_NE(r.describe().find("shape or strides not handled"), std::string::npos) << r.describe();
  LaunchResult t = fault(2, 1);
  EXPECT_EQ(t.status, LaunchStatus::Trap) << t.describe();
  EXPECT_EQ(t.hart, 2);
  EXPECT_EQ(t.mcause, uint64_t(ET_MCAUSE_NOT_IMPLEMENTED));
  LaunchResult ok = fault(99, 0);  // no hart has rank 99: all pass
  EXPECT_TRUE(ok.ok()) << ok.describe();
  EXPECT_GT(ok.kernel_cycles, 0u);
  // The slowest hart's kernel cycles are part of the launch's emulated cycles (the boot stub
  // divides out sys_emu's per-neighbourhood multiple of the cycle counter: boot.c read_cycles).
  EXPECT_LT(ok.kernel_cycles, ok.cycles) << ok.describe();
}
