// Driver selection (see driver.h).
#include "backends/rocket/driver/driver.h"

#include <ctime>

#include "backends/rocket/driver/drm_accel/drm_accel_driver.h"
#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "core/error.h"

namespace opal::rocket {

int64_t deadline_after(double seconds) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec + int64_t(seconds * 1e9);
}

std::vector<std::unique_ptr<Driver>> open_drivers(const DriverOptions& options) {
  std::vector<std::unique_ptr<Driver>> drivers;
  if (options.kind == "emulator") {
    drivers.push_back(std::make_unique<EmulatorDriver>());
  } else if (options.kind == "drm_accel") {
    if (options.cores < 1 || options.cores > 3) fail("rocket: {} NPU cores requested (1..3)", options.cores);
    for (unsigned i = 0; i < options.cores; i++) drivers.push_back(open_drm_accel(options.device));
  } else {
    fail("rocket: unknown driver '{}' (emulator, drm_accel)", options.kind);
  }
  return drivers;
}

}  // namespace opal::rocket
