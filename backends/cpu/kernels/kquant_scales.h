// Scalar helpers shared by the SIMD K-quant kernels: unpacking the 12 packed
// bytes of Q4_K/Q5_K 6-bit sub-block scales and mins (layout in
// core/quant/blocks.h and core/quant/k_quants.cpp). Included inside each
// ISA's unnamed namespace (see tile_driver.h).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

// sc[j], m[j] for the 8 sub-blocks of 32 elements.
inline void unpack_q4k_scales(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m[j] = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// f16 -> f32 with the ISA's own instruction: an out-of-line copy of a shared
// inline function compiled with ISA flags could otherwise be picked by the
// linker for code that runs on any CPU.
inline float load_f16(const uint8_t* p) {
#if defined(__F16C__) || defined(__AVX512F__)
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
#elif defined(__aarch64__)
  __fp16 h;
  std::memcpy(&h, p, 2);
  return float(h);
#else
#error "kquant_scales.h is for the SIMD kernels only"
#endif
}

inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Byte offsets inside the blocks (core/quant/blocks.h).
constexpr int kQ8_0Bytes = 34;   // d f16 | qs[32]
constexpr int kQ4_0Bytes = 18;   // d f16 | qs[16]
constexpr int kQ5_0Bytes = 22;   // d f16 | qh[4] | qs[16]
constexpr int kQ8_KBytes = 292;  // d f32 | qs[256] | bsums[16] i16
constexpr int kQ8_KQs = 4, kQ8_KBsums = 260;
constexpr int kQ4_KBytes = 144;  // d, dmin f16 | scales[12] | qs[128]
constexpr int kQ4_KScales = 4, kQ4_KQs = 16;
constexpr int kQ5_KBytes = 176;  // d, dmin | scales[12] | qh[32] | qs[128]
constexpr int kQ5_KScales = 4, kQ5_KQh = 16, kQ5_KQs = 48;
constexpr int kQ6_KBytes = 210;  // ql[128] | qh[64] | scales[16] i8 | d f16
constexpr int kQ6_KQh = 128, kQ6_KScales = 192, kQ6_KD = 208;

}  // namespace
