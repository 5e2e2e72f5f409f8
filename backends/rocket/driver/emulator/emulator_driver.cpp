// BoSpace and EmulatorDriver (see emulator_driver.h).
#include "backends/rocket/driver/emulator/emulator_driver.h"

#include "core/error.h"

namespace opal::rocket {

namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kAperture = uint64_t(1) << 32;  // rockchip-iommu: 32-bit IOVA per fd
}  // namespace

BoInfo BoSpace::create(uint64_t size) {
  const uint64_t rounded = (size + kPage - 1) / kPage * kPage;
  if (size == 0) fail("rocket: CREATE_BO of 0 bytes");
  if (next_iova_ + rounded > kAperture)
    fail("rocket: CREATE_BO of {} bytes exhausts the 4 GiB IOVA space of this fd", size);
  BoInfo b = create_at(uint32_t(next_iova_), size);
  next_iova_ += rounded;
  return b;
}

BoInfo BoSpace::create_at(uint32_t iova, uint64_t size) {
  const uint64_t rounded = (size + kPage - 1) / kPage * kPage;
  if (iova % kPage != 0) fail("rocket: BO address 0x{:08x} is not page-aligned", iova);
  if (uint64_t(iova) + rounded > kAperture) fail("rocket: BO at 0x{:08x} + {} leaves the 4 GiB aperture", iova, size);
  for (const auto& [h, bo] : bos_)
    if (iova < bo.info.iova + bo.info.size && bo.info.iova < iova + rounded)
      fail("rocket: BO at 0x{:08x} overlaps BO {} at 0x{:08x}", iova, h, bo.info.iova);
  Bo bo;
  bo.info = {next_handle_++, iova, rounded};
  bo.bytes.assign(rounded, 0);
  const BoInfo info = bo.info;
  bos_.emplace(info.handle, std::move(bo));
  return info;
}

uint8_t* BoSpace::data(uint32_t handle) {
  auto it = bos_.find(handle);
  if (it == bos_.end()) fail("rocket: no BO with handle {}", handle);
  return it->second.bytes.data();
}

const BoInfo& BoSpace::info(uint32_t handle) const {
  auto it = bos_.find(handle);
  if (it == bos_.end()) fail("rocket: no BO with handle {}", handle);
  return it->second.info;
}

void BoSpace::destroy(uint32_t handle) {
  if (!bos_.erase(handle)) fail("rocket: GEM_CLOSE of unknown handle {}", handle);
}

uint8_t* BoSpace::resolve(uint32_t iova, uint64_t size) {
  for (auto& [h, bo] : bos_)
    if (iova >= bo.info.iova && uint64_t(iova) + size <= uint64_t(bo.info.iova) + bo.info.size)
      return bo.bytes.data() + (iova - bo.info.iova);
  return nullptr;
}

BoInfo EmulatorDriver::create_bo(uint64_t size) {
  BoInfo b = space_.create(size);
  cpu_owned_[b.handle] = false;
  return b;
}

uint8_t* EmulatorDriver::cpu_pointer(uint32_t handle) {
  uint8_t* p = space_.data(handle);
  cpu_owned_[handle] = true;
  return p;
}

void EmulatorDriver::prep_bo(uint32_t handle, int64_t) {
  space_.data(handle);  // validates the handle; jobs ran synchronously
}

void EmulatorDriver::fini_bo(uint32_t handle) {
  space_.data(handle);
  cpu_owned_[handle] = false;
}

void EmulatorDriver::submit(std::span<const abi::JobDesc> jobs) {
  for (const auto& [h, owned] : cpu_owned_)
    if (owned)
      fail(
          "rocket: SUBMIT while BO {} is mapped for CPU writes without FINI_BO (the NPU would read stale "
          "cache lines)",
          h);
  for (const abi::JobDesc& job : jobs) {
    for (uint32_t h : job.in_bo_handles) space_.info(h);
    for (uint32_t h : job.out_bo_handles) space_.info(h);
    emulator_.run_job(job);
  }
}

void EmulatorDriver::destroy_bo(uint32_t handle) {
  space_.destroy(handle);
  cpu_owned_.erase(handle);
}

}  // namespace opal::rocket
