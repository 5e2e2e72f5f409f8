// Plain float formats: F32 (copy), F16 and BF16 (one 16-bit word per element,
// converted by core/fp16.h: exact widening; narrowing rounds to nearest even,
// BF16 quiets NaNs, as ggml does).
#include <cstring>

#include "core/fp16.h"
#include "core/quant/internal.h"

namespace opal::quant {

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(float)); }

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = f16_to_f32(h);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_f32(h);
  }
}

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(float)); }

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

}  // namespace opal::quant
