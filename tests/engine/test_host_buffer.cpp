// Large host buffers (graph/host_buffer.cpp): 2 MiB aligned, zeroed, usable,
// and, when asked, advised onto transparent huge pages past their first 2 MiB
// (OPAL_HOST_HUGE=1; 2: all of it; unset or 0: none, the default). The advice
// is read back from /proc/self/smaps: MADV_HUGEPAGE sets the VMA's "hg" flag
// whatever /sys/kernel/mm/transparent_hugepage/enabled says.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "graph/host_buffer.h"

namespace opal {
namespace {

constexpr uint64_t kHuge = 2u << 20;

// The VmFlags of the mapping holding addr, or "" when none is found.
std::string vm_flags(const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

bool thp_built() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

class HostBufferHuge : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("OPAL_HOST_HUGE"); }
  HostBufferType bt_{"cpu"};
};

TEST_F(HostBufferHuge, LargeBufferIsAlignedZeroedAndUsable) {
  for (uint64_t size : {kHuge, 5 * kHuge + 12345, uint64_t(64) << 20}) {
    auto buf = bt_.allocate(size);
    auto* p = static_cast<uint8_t*>(buf->base());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u) << size;
    for (uint64_t off : {uint64_t(0), size / 2, size - 1}) EXPECT_EQ(p[off], 0) << size << " @ " << off;
    std::vector<uint8_t> in(4096), out(4096);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7 + 1);
    buf->write(size - in.size(), in.data(), in.size());
    buf->read(size - out.size(), out.data(), out.size());
    EXPECT_EQ(in, out);
    p[0] = 0xAB;
    EXPECT_EQ(p[0], 0xAB);
  }
}

bool advised(const void* p) { return vm_flags(p).find(" hg ") != std::string::npos; }

TEST_F(HostBufferHuge, SwitchChoosesTheAdvisedRange) {
  if (!thp_built()) GTEST_SKIP() << "the kernel has no transparent huge pages";
  unsetenv("OPAL_HOST_HUGE");
  EXPECT_EQ(host_huge_pages(), HostHuge::Off);  // the default: no advice
  auto plain = bt_.allocate(8 * kHuge);
  EXPECT_FALSE(advised(static_cast<uint8_t*>(plain->base()) + 4 * kHuge));

  setenv("OPAL_HOST_HUGE", "1", 1);
  EXPECT_EQ(host_huge_pages(), HostHuge::Tail);
  auto tail = bt_.allocate(8 * kHuge);
  auto* t = static_cast<uint8_t*>(tail->base());
  if (vm_flags(t).empty()) GTEST_SKIP() << "/proc/self/smaps shows no VmFlags";
  EXPECT_FALSE(advised(t));  // the first 2 MiB on 4 KiB pages (a short run's cells)
  EXPECT_TRUE(advised(t + kHuge));
  EXPECT_TRUE(advised(t + 8 * kHuge - 1));

  setenv("OPAL_HOST_HUGE", "2", 1);
  EXPECT_EQ(host_huge_pages(), HostHuge::All);
  auto all = bt_.allocate(8 * kHuge);
  EXPECT_TRUE(advised(all->base()));

  setenv("OPAL_HOST_HUGE", "0", 1);
  EXPECT_EQ(host_huge_pages(), HostHuge::Off);
  auto off = bt_.allocate(8 * kHuge);
  auto* o = static_cast<uint8_t*>(off->base());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(o) % kHuge, 0u);
  EXPECT_FALSE(advised(o));
  EXPECT_FALSE(advised(o + 4 * kHuge));
}

TEST_F(HostBufferHuge, SmallBuffersGetNoAdvice) {
  if (!thp_built()) GTEST_SKIP() << "the kernel has no transparent huge pages";
  setenv("OPAL_HOST_HUGE", "2", 1);
  auto small = bt_.allocate(kHuge / 2 + 64);  // mmap'd (>= 1 MiB) but under one huge page
  EXPECT_FALSE(advised(small->base()));
}

}  // namespace
}  // namespace opal
