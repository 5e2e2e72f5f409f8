// Helpers to walk the rows (ne[0] runs) of possibly strided tensors.
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace opal::cpu {

// Byte address of row (i1, i2, i3) of t.
inline uint8_t* row_ptr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<uint8_t*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}
// Row r in flat order (i1 fastest) of t.
inline uint8_t* row_ptr_flat(const Tensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1];
  const int64_t i2 = (r / t.ne[1]) % t.ne[2];
  const int64_t i3 = r / (t.ne[1] * t.ne[2]);
  return row_ptr(t, i1, i2, i3);
}

}  // namespace opal::cpu
