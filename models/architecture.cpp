#include "models/architecture.h"

#include "core/error.h"

namespace opal {

// One entry per architecture file.
extern const Architecture kArchLlama;
extern const Architecture kArchQwen2;
extern const Architecture kArchQwen3;
extern const Architecture kArchQwen3Moe;

namespace {
const Architecture* const kArchitectures[] = {&kArchLlama, &kArchQwen2, &kArchQwen3, &kArchQwen3Moe};
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> n;
  for (const Architecture* a : kArchitectures) n.push_back(a->name);
  return n;
}

const Architecture& find_architecture(const std::string& name) {
  for (const Architecture* a : kArchitectures)
    if (a->name == name) return *a;
  std::string known;
  for (const auto& n : architecture_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown model architecture '{}' (supported: {})", name, known);
}

}  // namespace opal
