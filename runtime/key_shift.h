// Context shift support: after the positions of cached tokens change by
// `delta`, their keys (stored already rotated by RoPE) are rotated by the
// angle of `delta` so that they equal keys computed at the new positions.
// RoPE rotations compose: R(θ·(p+δ)) = R(θ·δ)·R(θ·p), for the plain, NeoX,
// linear-scaled and frequency-factor (Llama 3) variants alike.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"

namespace opal {

// Re-rotates the keys of `cells` in every layer by `delta` positions.
void rotate_keys(KvCache& kv, const Model& model, const std::vector<int32_t>& cells, int32_t delta);

}  // namespace opal
