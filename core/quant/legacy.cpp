// Legacy 32-element block quants: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//
// Layouts (core/quant/blocks.h): an f16 scale d (plus an f16 minimum m for the
// _1 types), 4-bit quants packed two per byte with element j in the low nibble
// of qs[j] and element j+16 in the high nibble, and for the 5-bit types the
// fifth bit of element j in bit j of the little-endian 32-bit qh.
//
// Quantizers reproduce llama.cpp's reference rounding bit for bit (checked
// against llama-quantize's files in tests/quant):
//   Q8_0: d = amax/127, id = 1/d (0 if d == 0), q = round-half-away(x*id).
//   Q4_0/Q5_0: d = v/-8 (v/-16), where v is the element of largest magnitude
//     (first one on ties) with its sign, so that v maps to -8 (-16) exactly;
//     q = min(15 (31), trunc(x*id + 8.5 (16.5))).
//   Q4_1/Q5_1: d = (max-min)/15 (31), m = min, q = trunc((x-min)*id + 0.5),
//     clamped to 15 for Q4_1.
// Every product and sum is rounded to f32 separately (this folder is compiled
// with -ffp-contract=off, see CMakeLists.txt), except where noted.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/fp16.h"
#include "core/quant/blocks.h"
#include "core/quant/internal.h"

namespace opal::quant {
namespace {

// The signed element of largest magnitude (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

uint32_t read_qh(const uint8_t qh[4]) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}
void write_qh(uint8_t qh[4], uint32_t v) {
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(v >> (8 * k));
}

}  // namespace

// ---------------------------------------------------------------- dequantize

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((b.qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = float((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(b.qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = float(b.qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    const uint32_t qh = read_qh(b.qh);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0F) | int((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
      y[j] = float(lo - 16) * d;
      y[j + kQK / 2] = float(hi - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
    const uint32_t qh = read_qh(b.qh);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0F) | int((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
      y[j] = float(lo) * d + m;
      y[j + kQK / 2] = float(hi) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = float(b.qs[j]) * d;
  }
}

// ------------------------------------------------------------------ quantize

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, int(x[j] * id + 8.5f));
      const int hi = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      b.qs[j] = uint8_t(lo | hi << 4);
    }
    store_block(dst, i, b);
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b{};
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, int((x[j] - mn) * id + 0.5f));
      const int hi = std::min(15, int((x[j + kQK / 2] - mn) * id + 0.5f));
      b.qs[j] = uint8_t(lo | hi << 4);
    }
    store_block(dst, i, b);
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b{};
    b.d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, int(x[j] * id + 16.5f));
      const int hi = std::min(31, int(x[j + kQK / 2] * id + 16.5f));
      b.qs[j] = uint8_t((lo & 0x0F) | (hi & 0x0F) << 4);
      qh |= uint32_t(lo >> 4) << j;
      qh |= uint32_t(hi >> 4) << (j + kQK / 2);
    }
    write_qh(b.qh, qh);
    store_block(dst, i, b);
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 b{};
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, int((x[j] - mn) * id + 0.5f));
      const int hi = std::min(31, int((x[j + kQK / 2] - mn) * id + 0.5f));
      b.qs[j] = uint8_t((lo & 0x0F) | (hi & 0x0F) << 4);
      qh |= uint32_t(lo >> 4) << j;
      qh |= uint32_t(hi >> 4) << (j + kQK / 2);
    }
    write_qh(b.qh, qh);
    store_block(dst, i, b);
  }
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) b.qs[j] = int8_t(std::round(x[j] * id));  // half away from zero
    store_block(dst, i, b);
  }
}

}  // namespace opal::quant
