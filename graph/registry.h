// The devices a model runs on. A Registry is an ordinary object; tools and
// tests build theirs with make_registry() (backends/factory/backend_factory.h),
// which adds the CPU and each backend named with --backend.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/backend.h"

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

 private:
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> sorted_;
};

}  // namespace opal
