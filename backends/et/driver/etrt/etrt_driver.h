// The et-platform runtime driver (etrt_driver.cpp): rt::IRuntime on a real
// ET-SoC-1 card. Built only with OPAL_ET_HAVE_ETRT (CMake found
// runtime::etrt_static under /opt/et); it has never been built or run in this
// repository's CI, which has no card and no /opt/et (docs/backends/et.md).
#pragma once
#include <memory>

#include "backends/et/driver/driver.h"

namespace opal::et {

std::unique_ptr<Driver> open_etrt_driver(const DriverOptions& options);

}  // namespace opal::et
