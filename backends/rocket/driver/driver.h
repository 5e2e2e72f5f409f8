// The driver seam: everything the rocket backend needs from the kernel driver,
// with two implementations: drm_accel/ (the mainline `rocket` DRM accel uAPI
// on Linux) and emulator/ (the same jobs executed in software).
//
// One Driver is one open file of /dev/accel/accel*: its own IOMMU address
// space (4 GiB), its own scheduler entity. Opening one Driver per NPU core is
// what lets the three cores run concurrently; BOs cannot be shared between
// Drivers.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/rocket/abi/job.h"

namespace opal::rocket {

struct BoInfo {
  uint32_t handle = 0;
  uint32_t iova = 0;  // NPU address, valid for this driver only
  uint64_t size = 0;  // bytes (page-rounded)
};

class Driver {
 public:
  virtual ~Driver() = default;
  virtual std::string name() const = 0;
  // CREATE_BO + mmap: a zero-filled buffer mapped for the CPU.
  virtual BoInfo create_bo(uint64_t size) = 0;
  virtual uint8_t* cpu_pointer(uint32_t handle) = 0;
  // PREP_BO: wait (until the absolute CLOCK_MONOTONIC deadline) for NPU
  // writers, then make the buffer coherent for CPU reads.
  virtual void prep_bo(uint32_t handle, int64_t deadline_ns) = 0;
  // FINI_BO: hand CPU writes over to the NPU (cache clean).
  virtual void fini_bo(uint32_t handle) = 0;
  // SUBMIT: queue the jobs; each job's tasks run in order on one core.
  virtual void submit(std::span<const abi::JobDesc> jobs) = 0;
  // GEM_CLOSE + munmap.
  virtual void destroy_bo(uint32_t handle) = 0;
};

// A deadline `seconds` from now on CLOCK_MONOTONIC, for prep_bo.
int64_t deadline_after(double seconds);

struct DriverOptions {
  std::string kind = "emulator";             // "emulator" or "drm_accel"
  std::string device = "/dev/accel/accel0";  // drm_accel: the accel node
  unsigned cores = 3;                        // drm_accel: one fd per core to use (1..3)
};

// Opens `options.cores` drivers (emulator: one). Throws opal::Error when the
// kind is unknown or the device cannot be opened.
std::vector<std::unique_ptr<Driver>> open_drivers(const DriverOptions& options);

}  // namespace opal::rocket
