// Named backend factories: the one list of backends a user can pick by name
// (`--backend cpu,test-accel`). Tools and tests build their Registry from it;
// a new backend adds one entry in backend_factory.cpp.
//
// This folder is its own layer (opal_factory): it sits above every backend
// library (opal_engine, opal_rocket, ...) so it may name them all.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/registry.h"

namespace opal {

// Backend-specific settings from the command line, passed to every factory
// (each reads its own). et_fusion: `--et-fusion on|off` (EtOptions::fusion).
struct BackendTuning {
  bool et_fusion = true;
};

struct BackendFactory {
  std::string name;         // what users type: "cpu", "test-accel", "rocket"
  std::string description;  // one line for --help and `opal ops`
  // Makes the device. n_threads: host threads the backend may use (0 = all).
  std::function<std::unique_ptr<Device>(int n_threads, const BackendTuning& tuning)> make;
};

// Every backend this build knows, the CPU first.
const std::vector<BackendFactory>& backend_factories();
// The factory of that name, or null.
const BackendFactory* find_backend_factory(std::string_view name);
// "cpu,test-accel" -> {"cpu", "test-accel"}; throws opal::Error naming an
// unknown or repeated name and listing the known ones.
std::vector<std::string> parse_backend_list(std::string_view list);
// A registry with the CPU (always: it is the fallback by role) plus each
// named backend. An empty list means the CPU alone.
std::unique_ptr<Registry> make_registry(const std::vector<std::string>& names, int n_threads,
                                        const BackendTuning& tuning = {});
// Comma-separated names of every factory, for help texts and errors.
std::string backend_names();

}  // namespace opal
