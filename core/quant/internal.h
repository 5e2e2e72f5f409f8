// Per-type reference kernels behind core/quant.h's dispatch (core/quant/dispatch.cpp).
// Each converts n elements (a whole number of blocks); src/dst need no alignment:
// blocks are copied in and out with memcpy.
#pragma once
#include <cstdint>
#include <cstring>

namespace opal::quant {

// Loads / stores block i of a byte stream without alignment assumptions.
template <typename Block>
inline Block load_block(const void* base, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + i * int64_t(sizeof(Block)), sizeof(Block));
  return b;
}
template <typename Block>
inline void store_block(void* base, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(base) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}

// float.cpp
void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);

// legacy.cpp
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);

// k_quants.cpp
void dequantize_q2_K(const void* src, float* dst, int64_t n);
void dequantize_q3_K(const void* src, float* dst, int64_t n);
void dequantize_q4_K(const void* src, float* dst, int64_t n);
void dequantize_q5_K(const void* src, float* dst, int64_t n);
void dequantize_q6_K(const void* src, float* dst, int64_t n);
void dequantize_q8_K(const void* src, float* dst, int64_t n);
void quantize_q2_K(const float* src, void* dst, int64_t n);
void quantize_q3_K(const float* src, void* dst, int64_t n);
void quantize_q4_K(const float* src, void* dst, int64_t n);
void quantize_q5_K(const float* src, void* dst, int64_t n);
void quantize_q6_K(const float* src, void* dst, int64_t n);
void quantize_q8_K(const float* src, void* dst, int64_t n);

// iq.cpp
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);

}  // namespace opal::quant
