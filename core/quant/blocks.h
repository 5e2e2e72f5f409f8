// GGUF block layouts, bit-compatible with ggml's block_* structs (ggml-common.h).
// Every multi-byte field is little-endian; f16 fields are stored as raw uint16_t
// bits (convert with core/fp16.h). QK_K = 256 elements per K-quant super-block.
//
//   type    elems bytes  layout
//   q4_0      32   18    d(f16) | qs[16]: element j in low nibble of qs[j], j+16 in high nibble; x = d*(q-8)
//   q4_1      32   20    d, m(f16) | qs[16] as q4_0; x = d*q + m
//   q5_0      32   22    d | qh[4] (bit j = 5th bit of element j) | qs[16] as q4_0; x = d*(q-16)
//   q5_1      32   24    d, m | qh[4] | qs[16]; x = d*q + m
//   q8_0      32   34    d | qs[32] int8; x = d*q
//   q2_K     256   84    scales[16] (low nibble scale, high nibble min, per 16) | qs[64] 2-bit |
//                        d, dmin(f16); x = d*sc*q - dmin*m
//   q3_K     256  110    hmask[32] (high bit) | qs[64] low 2 bits | scales[12] (16 x 6-bit, biased 32) | d
//   q4_K     256  144    d, dmin | scales[12] (8 x 6-bit scale + 8 x 6-bit min) | qs[128]
//   q5_K     256  176    d, dmin | scales[12] | qh[32] | qs[128]
//   q6_K     256  210    ql[128] low 4 bits | qh[64] high 2 bits | scales[16] int8 | d; x = d*sc*(q-32)
//   q8_K     256  292    d (f32) | qs[256] int8 | bsums[16] int16 (sums of 16 quants)
//   iq4_nl    32   18    d | qs[16] 4-bit indices into kIq4nlValues, nibble order as q4_0
//   iq4_xs   256  136    d | scales_h (2 high bits x 8) | scales_l[4] (4 low bits x 8) | qs[128];
//                        sub-block scale = (6-bit value - 32)
#pragma once
#include <cstdint>

namespace opal::quant {

inline constexpr int kQK = 32;     // elements per legacy / iq4_nl block
inline constexpr int kQK_K = 256;  // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

// Sizes as in core/dtype.cpp's table (tests also compare against type_size()).
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);

// The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

}  // namespace opal::quant
