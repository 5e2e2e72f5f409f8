// The op x dtype x backend support matrix (`opal ops`, docs/ops.md): every
// backend's supports() asked about a representative node of each op and
// dtype (op_cases.h), with its reasons.
#pragma once
#include <string>
#include <vector>

namespace opal {

struct SupportCell {
  std::string backend;  // factory name
  std::string op;       // "MUL_MAT"
  std::string dtype;    // "q8_0"
  enum State { Yes, No, NotApplicable } state = Yes;
  std::string reason;  // why not (or why the graph cannot express it)
};

struct SupportMatrix {
  std::vector<std::string> backends;
  std::vector<std::string> descriptions;  // per backend
  std::vector<SupportCell> cells;         // op-major, then dtype, then backend
  std::vector<std::string> unavailable;   // "name: why" of factories that could not make a device here
  std::string markdown() const;
  std::string csv() const;
};

// For the named backends (factory names); all factories when empty, leaving
// out those that cannot make a device on this machine (real hardware absent).
SupportMatrix support_matrix(const std::vector<std::string>& backends);

}  // namespace opal
