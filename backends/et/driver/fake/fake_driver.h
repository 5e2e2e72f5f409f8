// The fake driver: a fast host model of the driver contract (driver.h) for
// unit tests of the ET host side. Device memory is host memory behind device
// addresses in the same DRAM range as the card; "kernels" are host functions
// registered by name that read the launch's argument blob and device memory
// through the same addresses a kernel would. Faults can be injected per
// kernel (a trap on a hart, a timeout, a coherence report) to test the host's
// error paths. It models no ET numerics: kernels on the emulator are tested
// with the sysemu driver.
#pragma once
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/et/driver/driver.h"
#include "graph/offset_allocator.h"

namespace opal::et {

class FakeDriver;

// What a fake kernel sees: the blob, the hart set, device memory.
struct FakeLaunch {
  FakeDriver& driver;
  const LaunchRequest& request;
  // A host pointer to `n` bytes of device memory at `addr` (inside one allocation).
  uint8_t* mem(DevAddr addr, uint64_t n);
  template <class T>
  T arg(uint64_t offset) const;
};

// A fake kernel returns Ok or the fault it models (status, hart, mcause...).
using FakeKernel = std::function<LaunchResult(FakeLaunch&)>;

class FakeDriver final : public Driver {
 public:
  explicit FakeDriver(HartSet harts = {}, uint64_t memory_bytes = uint64_t(1) << 32);
  const DriverInfo& info() const override { return info_; }
  DevAddr alloc(uint64_t size, uint64_t align = 64) override;
  void free(DevAddr addr) override;
  void copy_in(DevAddr dst, const void* src, uint64_t n) override;
  void copy_out(DevAddr src, void* dst, uint64_t n) override;
  CodeId load_code(std::string_view name, std::span<const uint8_t> image) override;
  void launch(const LaunchRequest& request) override;
  LaunchResult wait() override;

  // Registers the host function that stands for kernel image `name`.
  void add_kernel(const std::string& name, FakeKernel kernel);
  // The next launch of code `name` (any kernel name when empty) fails with `fault`.
  void inject_fault(const std::string& name, LaunchResult fault);
  uint8_t* mem(DevAddr addr, uint64_t n, const char* what = "access");

  // Counters for tests.
  uint64_t launches = 0, bytes_in = 0, bytes_out = 0;
  uint64_t live_allocations() const { return allocs_.size(); }
  const std::vector<LaunchRequest>& history() const { return history_; }

 private:
  DriverInfo info_;
  OffsetAllocator arena_{64};
  struct Alloc {
    uint64_t offset, reserved;
    std::vector<uint8_t> bytes;
  };
  std::map<DevAddr, Alloc> allocs_;
  std::vector<std::string> code_;
  std::map<std::string, FakeKernel> kernels_;
  std::map<std::string, LaunchResult> faults_;
  std::vector<LaunchRequest> queue_, history_;
};

template <class T>
T FakeLaunch::arg(uint64_t offset) const {
  T v{};
  if (offset + sizeof(T) > request.args.size())
    throw std::out_of_range("fake kernel '" + request.kernel + "': argument read past the blob");
  std::memcpy(&v, request.args.data() + offset, sizeof(T));
  return v;
}

}  // namespace opal::et
