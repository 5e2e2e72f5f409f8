// The real driver: one open file of the rocket accel node (Linux only).
#pragma once
#include <map>

#include "backends/rocket/driver/driver.h"

namespace opal::rocket {

// Throws opal::Error on non-Linux builds or when the node cannot be opened.
std::unique_ptr<Driver> open_drm_accel(const std::string& device);

}  // namespace opal::rocket
