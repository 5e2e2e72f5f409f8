// Scalar conversions between f32 and the 16-bit float formats GGUF stores.
// f16 -> f32 and bf16 -> f32 are exact. f32 -> f16 rounds to nearest even (as
// F16C's vcvtps2ph and ggml's scalar path); f32 -> bf16 rounds to nearest even
// and quiets NaNs (as ggml_compute_fp32_to_bf16).
#pragma once
#include <bit>
#include <cstdint>

namespace opal {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float v = float(mant) * (1.0f / 16777216.0f);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
  }
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {                                  // result is subnormal or zero
    // value * 2^24 rounded to nearest even gives the subnormal mantissa
    const float a = std::bit_cast<float>(absx);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    // round half to even without relying on the FP rounding mode being default
    uint32_t m = uint32_t(scaled);
    const float frac = scaled - float(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  const uint32_t exp = ((absx >> 23) - 112u) << 10;
  const uint32_t mant = (absx >> 13) & 0x3ffu;
  uint32_t h = exp | mant;
  const uint32_t rest = absx & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return uint16_t(sign | h);
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64u);  // quiet NaN
  return uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace opal
