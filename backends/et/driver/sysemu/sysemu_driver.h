// The in-process sw-sysemu driver (sysemu_driver.cpp); built only with
// OPAL_ET_HAVE_SYSEMU.
#pragma once
#include <memory>

#include "backends/et/driver/driver.h"

namespace opal::et {

std::unique_ptr<Driver> open_sysemu_driver(const DriverOptions& options);

}  // namespace opal::et
