// The fake driver (fake_driver.h): host memory behind device addresses,
// host functions for kernels, injected faults.
#include "backends/et/driver/fake/fake_driver.h"

#include <chrono>
#include <cstring>

#include "core/error.h"

namespace opal::et {

constexpr uint64_t kFakeBase = 0x8010000000ull;

uint8_t* FakeLaunch::mem(DevAddr addr, uint64_t n) { return driver.mem(addr, n, request.kernel.c_str()); }

FakeDriver::FakeDriver(HartSet harts, uint64_t memory_bytes) {
  info_.name = "fake";
  info_.harts = harts;
  info_.memory_bytes = memory_bytes;
  info_.description = fmt::format("host model of the ET driver contract ({} harts, no ET numerics)", harts.count());
}

DevAddr FakeDriver::alloc(uint64_t size, uint64_t align) {
  if (align < 64 || (align & (align - 1))) fail("et fake: alignment {} is not a power of two >= 64", align);
  uint64_t reserved = align_to(std::max<uint64_t>(size, 1), 64) + (align - 64);
  uint64_t off = arena_.alloc(reserved);
  if (off + reserved > info_.memory_bytes) {
    arena_.release(off, reserved);
    fail("et fake: out of device memory: {} bytes requested ({} bytes of device memory)", size, info_.memory_bytes);
  }
  DevAddr a = align_to(kFakeBase + off, align);
  allocs_[a] = Alloc{off, reserved, std::vector<uint8_t>(align_to(std::max<uint64_t>(size, 1), 64), 0)};
  return a;
}

void FakeDriver::free(DevAddr addr) {
  auto it = allocs_.find(addr);
  if (it == allocs_.end()) fail("et fake: free of {:#x}: not an allocation", addr);
  arena_.release(it->second.offset, it->second.reserved);
  allocs_.erase(it);
}

uint8_t* FakeDriver::mem(DevAddr addr, uint64_t n, const char* what) {
  auto it = allocs_.upper_bound(addr);
  if (it != allocs_.begin()) {
    --it;
    if (addr >= it->first && addr + n <= it->first + it->second.bytes.size())
      return it->second.bytes.data() + (addr - it->first);
  }
  fail("et fake: {} of {} bytes at {:#x}: not inside one allocation", what, n, addr);
}

void FakeDriver::copy_in(DevAddr dst, const void* src, uint64_t n) {
  std::memcpy(mem(dst, n, "copy_in"), src, n);
  bytes_in += n;
}

void FakeDriver::copy_out(DevAddr src, void* dst, uint64_t n) {
  std::memcpy(dst, mem(src, n, "copy_out"), n);
  bytes_out += n;
}

CodeId FakeDriver::load_code(std::string_view name, std::span<const uint8_t>) {
  for (size_t i = 0; i < code_.size(); i++)
    if (code_[i] == name) return CodeId(i);
  if (!kernels_.count(std::string(name))) fail("et fake: kernel image '{}' has no host model (add_kernel)", name);
  code_.emplace_back(name);
  return CodeId(code_.size() - 1);
}

void FakeDriver::add_kernel(const std::string& name, FakeKernel kernel) { kernels_[name] = std::move(kernel); }

void FakeDriver::inject_fault(const std::string& name, LaunchResult fault) { faults_[name] = std::move(fault); }

void FakeDriver::launch(const LaunchRequest& rq) {
  if (rq.code >= code_.size()) fail("et fake: launch of '{}': code id {} was never loaded", rq.kernel, rq.code);
  const HartSet& h = rq.harts;
  if ((h.shire_mask & ~info_.harts.shire_mask) || (h.minion_mask & ~info_.harts.minion_mask) ||
      h.threads > info_.harts.threads || h.threads == 0 || h.shire_mask == 0 || h.minion_mask == 0)
    fail("et fake: launch of '{}' on shires {:#x} x minions {:#x} x {} threads: outside the device", rq.kernel,
         h.shire_mask, h.minion_mask, h.threads);
  queue_.push_back(rq);
}

LaunchResult FakeDriver::wait() {
  LaunchResult last;
  std::vector<LaunchRequest> q;
  q.swap(queue_);
  for (const LaunchRequest& rq : q) {
    auto t0 = std::chrono::steady_clock::now();
    launches++;
    history_.push_back(rq);
    const std::string& code = code_[rq.code];
    auto fault = faults_.find(code);
    if (fault == faults_.end()) fault = faults_.find("");
    if (fault != faults_.end()) {
      last = fault->second;
      faults_.erase(fault);
    } else {
      FakeLaunch fl{*this, rq};
      last = kernels_.at(code)(fl);
    }
    last.kernel = rq.kernel;
    last.harts = rq.harts.count();
    last.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!last.ok()) return last;
  }
  return last;
}

}  // namespace opal::et
