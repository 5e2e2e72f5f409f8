// Row conversions between a tensor dtype and f32, used by every CPU op.
// F32/F16/BF16 are converted inline; every other type goes through the
// reference dequantizer (core/quant.h).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant.h"

namespace opal::cpu {

inline void row_to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default: dequantize_row(t, src, dst, n); return;
  }
}

// Only F32 / F16 / BF16 destinations (the KV cache and CPY).
inline void row_from_f32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    default: break;
  }
}

inline bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Whether rows of type t can be converted to f32 by row_to_f32.
inline bool can_read_as_f32(DType t) { return is_float_type(t) || can_dequantize(t); }

}  // namespace opal::cpu
