#include "graph/registry.h"

#include <algorithm>

#include "core/error.h"

namespace opal {

Device& Registry::add(std::unique_ptr<Device> dev) {
  Device* d = dev.get();
  owned_.push_back(std::move(dev));
  sorted_.push_back(d);
  std::stable_sort(sorted_.begin(), sorted_.end(),
                   [](const Device* a, const Device* b) { return a->priority() > b->priority(); });
  return *d;
}

Device& Registry::host() const {
  for (Device* d : sorted_)
    if (d->role() == DeviceRole::Host) return *d;
  fail("no host (CPU) device in the registry");
}

Device* Registry::find(const std::string& name) const {
  for (Device* d : sorted_)
    if (d->name() == name) return d;
  return nullptr;
}

void Registry::set_threads(int n) {
  for (Device* d : sorted_) d->set_threads(n);
}

}  // namespace opal
