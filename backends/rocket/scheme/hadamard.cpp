// Block Walsh-Hadamard rotation with fixed signs (see hadamard.h).
#include "backends/rocket/scheme/hadamard.h"

#include <cmath>

#include "core/error.h"

namespace opal::rocket {
namespace {

// The sign of D at channel i of a block: bits of a fixed 32-bit hash.
float sign_of(unsigned i) {
  uint32_t h = i * 0x9e3779b1u;
  h ^= h >> 15;
  h *= 0x85ebca77u;
  h ^= h >> 13;
  return (h & 1u) ? -1.0f : 1.0f;
}

}  // namespace

unsigned rotation_block(unsigned k_padded) {
  if (k_padded == 0) fail("rocket: rotation of an empty row");
  unsigned b = 1;
  while (b < kMaxRotationBlock && k_padded % (b * 2) == 0) b *= 2;
  return b;
}

void rotate_row(float* x, unsigned n, unsigned block) {
  if (block == 0 || (block & (block - 1)) != 0 || n % block != 0)
    fail("rocket: rotation block {} does not divide the row of {}", block, n);
  const float norm = 1.0f / std::sqrt(float(block));
  for (unsigned b0 = 0; b0 < n; b0 += block) {
    float* v = x + b0;
    for (unsigned i = 0; i < block; ++i) v[i] *= sign_of(i);
    for (unsigned h = 1; h < block; h *= 2)
      for (unsigned i = 0; i < block; i += 2 * h)
        for (unsigned j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
    for (unsigned i = 0; i < block; ++i) v[i] *= norm;
  }
}

}  // namespace opal::rocket
