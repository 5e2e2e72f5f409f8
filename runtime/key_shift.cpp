#include "runtime/key_shift.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "graph/rope.h"
#include "models/decoder.h"

namespace opal {
namespace {

float load(DType t, const uint8_t* row, int64_t i) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, row + 4 * i, 4);
      return v;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return f16_to_f32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return bf16_to_f32(h);
    }
  }
}

void store(DType t, uint8_t* row, int64_t i, float v) {
  switch (t) {
    case DType::F32: std::memcpy(row + 4 * i, &v, 4); break;
    case DType::F16: {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(row + 2 * i, &h, 2);
      break;
    }
    default: {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(row + 2 * i, &h, 2);
      break;
    }
  }
}

}  // namespace

void rotate_keys(KvCache& kv, const Model& model, const std::vector<int32_t>& cells, int32_t delta) {
  const HParams& hp = model.hparams();
  const int64_t n_rot_max = std::max(hp.n_rot, hp.n_rot_swa);
  if (n_rot_max <= 0) return;
  std::vector<float> factors(size_t(hp.n_rot / 2), 1.0f), ones(size_t(n_rot_max / 2), 1.0f);
  if (const Tensor* ff = model.weight("rope_freqs.weight")) {
    if (ff->type != DType::F32 || ff->ne[0] < hp.n_rot / 2) fail("rope_freqs.weight must be F32 [{}]", hp.n_rot / 2);
    if (ff->buffer && !ff->buffer->type().host_visible())
      ff->buffer->read(
          uint64_t(static_cast<const uint8_t*>(ff->data) - static_cast<const uint8_t*>(ff->buffer->base())),
          factors.data(), factors.size() * sizeof(float));
    else std::memcpy(factors.data(), ff->data, factors.size() * sizeof(float));
  }
  // The angles of a `delta` rotation (a pure rotation: no YaRN magnitude), per layer: sliding-window layers
  // may have their own RoPE base, size and no frequency factors (Gemma).
  std::vector<float> cs(static_cast<size_t>(n_rot_max));
  const bool neox = hp.rope_mode == RopeMode::Neox;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (!kv.has_layer(il)) continue;  // in the other cache, or no K/V of its own
    const LayerAttention la = layer_attention(model.arch().decoder, hp, il);
    RopeParams rp = la.rope;
    rp.unit_magnitude = true;
    const int64_t n_rot = rp.n_rot, hd = hp.head_dim_k_at(il);
    rope_cos_sin(rp, float(delta), la.freq_factors ? factors.data() : ones.data(), cs.data());
    Tensor& k = *kv.k(il);
    // A quantized row (q8_0, q4_0) is rotated in f32 and quantized again, as llama.cpp's K shift does.
    const bool quantized = dtype_traits(k.type).quantized;
    std::vector<float> f(quantized ? size_t(k.ne[0]) : 0);
    for (int32_t c : cells) {
      uint8_t* row = static_cast<uint8_t*>(k.data) + uint64_t(c) * k.nb[1];
      if (quantized) dequantize_row(k.type, row, f.data(), k.ne[0]);
      for (int64_t h = 0; h < hp.n_head_kv; ++h) {
        const int64_t base = h * hd;
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const int64_t a = base + (neox ? i : 2 * i), b = base + (neox ? i + n_rot / 2 : 2 * i + 1);
          const float co = cs[size_t(2 * i)], si = cs[size_t(2 * i + 1)];
          if (quantized) {
            const float x0 = f[size_t(a)], x1 = f[size_t(b)];
            f[size_t(a)] = x0 * co - x1 * si;
            f[size_t(b)] = x0 * si + x1 * co;
            continue;
          }
          const float x0 = load(k.type, row, a), x1 = load(k.type, row, b);
          store(k.type, row, a, x0 * co - x1 * si);
          store(k.type, row, b, x0 * si + x1 * co);
        }
      }
      if (quantized) quantize_rows(k.type, f.data(), row, 1, k.ne[0]);
    }
  }
}

}  // namespace opal
