// The devices a model runs on. A Registry is an ordinary object (tests build
// their own with a test accelerator); default_registry() holds the CPU plus
// every accelerator found on this machine.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace opal {

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Device& add(std::unique_ptr<Device> dev);
  // Devices sorted by descending priority.
  const std::vector<Device*>& devices() const { return sorted_; }
  // The Host-role device (the fallback). Throws if none was added.
  Device& host() const;
  Device* find(const std::string& name) const;
  void set_threads(int n);

  // A registry with the CPU backend using n_threads (0 = hardware threads).
  static std::unique_ptr<Registry> with_cpu(int n_threads);

 private:
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> sorted_;
};

}  // namespace opal
