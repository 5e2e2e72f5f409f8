// Activation quantizers matching llama.cpp's x86 CPU path (see activation.h).
#include "core/quant/activation.h"

#include <cmath>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant/blocks.h"

namespace opal {
namespace {

// One 32-value block: the inverse scale 127/amax, round half to even.
template <typename Block>
float quantize_block32(const float* x, Block& b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  b.d = f32_to_f16(d);
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    const int q = int(std::nearbyint(x[i] * id));  // the default FP mode rounds half to even
    b.qs[i] = int8_t(q);
    sum += q;
  }
  return float(sum) * d;
}

}  // namespace

bool is_activation_type(DType t) { return t == DType::Q8_0 || t == DType::Q8_1 || t == DType::Q8_K; }

void quantize_activation_row(DType t, const float* x, void* dst, int64_t k) {
  switch (t) {
    case DType::Q8_0: {
      if (k % 32) fail("Q8_0 activations need a multiple of 32 values, got {}", k);
      auto* b = static_cast<quant::BlockQ8_0*>(dst);
      for (int64_t i = 0; i < k / 32; ++i) quantize_block32(x + 32 * i, b[i]);
      return;
    }
    case DType::Q8_1: {
      if (k % 32) fail("Q8_1 activations need a multiple of 32 values, got {}", k);
      auto* b = static_cast<BlockQ8_1*>(dst);
      for (int64_t i = 0; i < k / 32; ++i) b[i].s = f32_to_f16(quantize_block32(x + 32 * i, b[i]));
      return;
    }
    case DType::Q8_K: quantize_rows(DType::Q8_K, x, dst, 1, k); return;
    default: fail("{} is not an activation type", dtype_name(t));
  }
}

void dequantize_activation_row(DType t, const void* src, float* dst, int64_t k) {
  if (t == DType::Q8_1) {
    const auto* b = static_cast<const BlockQ8_1*>(src);
    for (int64_t i = 0; i < k / 32; ++i) {
      const float d = f16_to_f32(b[i].d);
      for (int j = 0; j < 32; ++j) dst[32 * i + j] = d * float(b[i].qs[j]);
    }
    return;
  }
  dequantize_row(t, src, dst, k);
}

}  // namespace opal
