// The emulator implementation of the driver seam: buffers are host memory at
// IOVAs from a page-aligned bump allocator (like the kernel's per-fd drm_mm
// from a configurable base), SUBMIT runs every job synchronously on an
// NpuEmulator, PREP/FINI track CPU/NPU ownership.
#pragma once
#include <map>

#include "backends/rocket/driver/driver.h"
#include "backends/rocket/driver/emulator/npu_emulator.h"

namespace opal::rocket {

// Buffers at fixed IOVAs; shared by the emulator driver and tests.
class BoSpace : public NpuMemory {
 public:
  explicit BoSpace(uint32_t iova_base = 0) : next_iova_(iova_base) {}
  BoInfo create(uint64_t size);
  // Places a buffer at a given IOVA (page-aligned, non-overlapping).
  BoInfo create_at(uint32_t iova, uint64_t size);
  uint8_t* data(uint32_t handle);
  const BoInfo& info(uint32_t handle) const;
  void destroy(uint32_t handle);
  uint8_t* resolve(uint32_t iova, uint64_t size) override;

 private:
  struct Bo {
    BoInfo info;
    std::vector<uint8_t> bytes;
  };
  std::map<uint32_t, Bo> bos_;  // by handle
  uint32_t next_handle_ = 1;
  uint64_t next_iova_;
};

class EmulatorDriver : public Driver {
 public:
  explicit EmulatorDriver(EmulatorOptions options = {}, uint32_t iova_base = 0)
      : space_(iova_base), emulator_(space_, options) {}
  std::string name() const override { return "rocket-emulator"; }
  BoInfo create_bo(uint64_t size) override;
  uint8_t* cpu_pointer(uint32_t handle) override;
  void prep_bo(uint32_t handle, int64_t deadline_ns) override;
  void fini_bo(uint32_t handle) override;
  void submit(std::span<const abi::JobDesc> jobs) override;
  void destroy_bo(uint32_t handle) override;

  NpuEmulator& emulator() { return emulator_; }
  BoSpace& space() { return space_; }

 private:
  BoSpace space_;
  NpuEmulator emulator_;
  std::map<uint32_t, bool> cpu_owned_;  // handle -> CPU may have written it since the last FINI
};

}  // namespace opal::rocket
