// K-quants: 256-element super-blocks (QK_K) split into 16 or 8 sub-blocks, each
// with its own small integer scale (and minimum), itself quantized against one
// or two f16 super-block scales. Layouts in core/quant/blocks.h:
//
//   Q2_K: 16 sub-blocks of 16. scales[j] = scale4 | min4<<4; qs packs 4 quants
//         per byte: byte l of each 32-byte group g holds elements 128g+l, +32,
//         +64, +96 in bits 0-1, 2-3, 4-5, 6-7. x = d*scale*q - dmin*min.
//   Q3_K: 16 sub-blocks of 16. 2 low bits in qs as Q2_K, the third bit in hmask
//         (element j -> hmask[j % 32] bit j / 32); q = low - (bit ? 0 : 4).
//         12 scale bytes hold 16 6-bit scales biased by 32: scale j's low nibble
//         is in byte j (j < 8, low nibble) or byte j-8 (high nibble), its high 2
//         bits in byte 8 + j%4 at bit 2*(j/4). x = d*(scale-32)*q.
//   Q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes
//         (sub-block j < 4: bytes j and j+4 low 6 bits; j >= 4: low nibbles in
//         byte j+4, high 2 bits in the top bits of bytes j-4 and j). qs: 64
//         elements per 32 bytes, first 32 in low nibbles. x = d*sc*q - dmin*m.
//   Q5_K: as Q4_K plus qh: bit 2*(j/64) (low nibble half) or 2*(j/64)+1 (high
//         nibble half) of qh[j % 32] is the fifth bit.
//   Q6_K: 16 sub-blocks of 16 with int8 scales; per 128 elements, ql holds the
//         low nibbles (elements l and l+64 in byte l, l+32 and l+96 in byte
//         l+32), qh the 2 high bits of l, l+32, l+64, l+96 in bits 0-1..6-7.
//         x = d*scale*(q-32).
//   Q8_K: f32 d, int8 quants (x = d*q) and the sum of each 16 quants (bsums),
//         the activation format of the K-quant dot products.
//
// Quantizers follow llama.cpp's reference (no importance matrix) algorithms:
// per-sub-block scale searches (scale_search.h), then the sub-block scales are
// quantized against the super-block scale and every element is re-rounded with
// the scale it will actually be decoded with.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant/blocks.h"
#include "core/quant/internal.h"
#include "core/quant/scale_search.h"

namespace opal::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes.
void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void pack_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= uint8_t((ls >> 4) << 6);
    q[j] |= uint8_t((lm >> 4) << 6);
  }
}

// Q3_K: the 16 signed scales (already minus 32) from the 12 packed bytes.
void unpack_q3_scales(const uint8_t* s, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | high << 4) - 32);
  }
}

// Packs 2-bit values: byte l of 32-byte group g holds L[128g + l + 32k] at bits 2k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

}  // namespace

// ---------------------------------------------------------------- dequantize

void dequantize_q2_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) {
      const int sub = j / 16;
      const int q = (b.qs[(j / 128) * 32 + j % 32] >> (2 * ((j % 128) / 32))) & 3;
      const float dl = d * float(b.scales[sub] & 0xF);
      const float ml = dmin * float(b.scales[sub] >> 4);
      y[j] = dl * float(q) - ml;
    }
  }
}

void dequantize_q3_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d = f16_to_f32(b.d);
    int8_t scales[16];
    unpack_q3_scales(b.scales, scales);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) {
      const int low = (b.qs[(j / 128) * 32 + j % 32] >> (2 * ((j % 128) / 32))) & 3;
      const bool high = (b.hmask[j % 32] >> (j / 32)) & 1;
      const float dl = d * float(scales[j / 16]);
      y[j] = dl * float(low - (high ? 0 : 4));
    }
  }
}

void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j / 32, b.scales, &sc, &m);
      const uint8_t byte = b.qs[(j / 64) * 32 + j % 32];
      const int q = (j % 64) < 32 ? (byte & 0xF) : (byte >> 4);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      y[j] = d1 * float(q) - m1;
    }
  }
}

void dequantize_q5_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j / 32, b.scales, &sc, &m);
      const uint8_t byte = b.qs[(j / 64) * 32 + j % 32];
      const int low = (j % 64) < 32 ? (byte & 0xF) : (byte >> 4);
      const int high = (b.qh[j % 32] >> (j / 32)) & 1;  // bit 2*(j/64) + (j%64 >= 32)
      const float d1 = d * float(sc), m1 = dmin * float(m);
      y[j] = d1 * float(low + 16 * high) - m1;
    }
  }
}

void dequantize_q6_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) {
      const int g = j / 128, r = j % 128;   // 128-element half, position in it
      const int l = r % 32, part = r / 32;  // part 0..3: elements l, l+32, l+64, l+96
      const uint8_t lbyte = b.ql[g * 64 + l + 32 * (part & 1)];
      const int low = part < 2 ? (lbyte & 0xF) : (lbyte >> 4);
      const int high = (b.qh[g * 32 + l] >> (2 * part)) & 3;
      const int q = (low | high << 4) - 32;
      y[j] = d * float(b.scales[j / 16]) * float(q);
    }
  }
}

void dequantize_q8_K(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ8_K>(src, i);
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b.d * float(b.qs[j]);
  }
}

// ------------------------------------------------------------------ quantize

void quantize_q2_K(const float* src, void* dst, int64_t n) {
  const float q4scale = 15.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    uint8_t L[kQK_K], Laux[16];
    float weights[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    BlockQ2_K b{};
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      b.d = f32_to_f16(max_scale / q4scale);
    } else {
      b.d = f32_to_f16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) b.scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      b.dmin = f32_to_f16(max_min / q4scale);
    } else {
      b.dmin = f32_to_f16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = f16_to_f32(b.d) * float(b.scales[j] & 0xF);
      if (d == 0) continue;
      const float dm = f16_to_f32(b.dmin) * float(b.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = uint8_t(clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
    }
    pack_2bit(L, b.qs);
    store_block(dst, i, b);
  }
}

void quantize_q3_K(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    BlockQ3_K b{};
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = clamp_int(int(int8_t(nearest_int(iscale * scales[j]))), -32, 31) + 32;
        if (j < 8) b.scales[j] = uint8_t(l & 0xF);
        else b.scales[j - 8] |= uint8_t((l & 0xF) << 4);
        b.scales[j % 4 + 8] |= uint8_t((l >> 4) << (2 * (j / 4)));
      }
      b.d = f32_to_f16(1 / iscale);
    } else {
      b.d = f32_to_f16(0.0f);
    }
    int8_t sc[16];
    unpack_q3_scales(b.scales, sc);
    for (int j = 0; j < 16; ++j) {
      const float d = f16_to_f32(b.d) * float(sc[j]);
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = int8_t(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    // The high bit of element j goes to hmask[j % 32], bit j / 32.
    uint8_t low[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) b.hmask[j % 32] |= uint8_t(1u << (j / 32));
      low[j] = uint8_t(L[j] > 3 ? L[j] - 4 : L[j]);
    }
    pack_2bit(low, b.qs);
    store_block(dst, i, b);
  }
}

namespace {

// Q4_K and Q5_K share everything but the quant width (nmax 15 or 31) and the
// search parameters; fills the scales, d, dmin and the final quants L.
template <typename Block>
void quantize_k4_style(const float* x, Block& b, uint8_t* L, int nmax, float rmin, float rdelta, int nstep) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
    pack_scale_min_k4(j, ls, lm, b.scales);
  }
  b.d = f32_to_f16(max_scale / 63.0f);
  b.dmin = f32_to_f16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, b.scales, &sc, &m);
    const float d = f16_to_f32(b.d) * float(sc);
    if (d == 0) continue;
    const float dm = f16_to_f32(b.dmin) * float(m);
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = uint8_t(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

}  // namespace

void quantize_q4_K(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    BlockQ4_K b{};
    uint8_t L[kQK_K];
    quantize_k4_style(src + i * kQK_K, b, L, 15, -1.0f, 0.1f, 20);
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l) b.qs[j / 2 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    store_block(dst, i, b);
  }
}

void quantize_q5_K(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    BlockQ5_K b{};
    uint8_t L[kQK_K];
    quantize_k4_style(src + i * kQK_K, b, L, 31, -0.5f, 0.1f, 15);
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[j + l], hi = L[j + l + 32];
        b.qs[j / 2 + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        b.qh[l] |= uint8_t((lo >> 4) << (j / 32));
        b.qh[l] |= uint8_t((hi >> 4) << (j / 32 + 1));
      }
    }
    store_block(dst, i, b);
  }
}

void quantize_q6_K(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, nullptr);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    BlockQ6_K b{};
    if (max_abs_scale < kGroupMaxEps) {  // all zeros
      b.d = f32_to_f16(0.0f);
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) b.scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = f16_to_f32(b.d) * float(b.scales[j]);
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = int8_t(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    for (int g = 0; g < 2; ++g) {
      const int8_t* Lg = L + 128 * g;
      for (int l = 0; l < 32; ++l) {
        b.ql[64 * g + l] = uint8_t((Lg[l] & 0xF) | ((Lg[l + 64] & 0xF) << 4));
        b.ql[64 * g + l + 32] = uint8_t((Lg[l + 32] & 0xF) | ((Lg[l + 96] & 0xF) << 4));
        b.qh[32 * g + l] =
            uint8_t((Lg[l] >> 4) | ((Lg[l + 32] >> 4) << 2) | ((Lg[l + 64] >> 4) << 4) | ((Lg[l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

void quantize_q8_K(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ8_K b{};
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax != 0) {
      // -127 (not -128) so that the extreme value maps to -127 and every quant fits in [-127, 127].
      const float iscale = -127.0f / max;
      for (int j = 0; j < kQK_K; ++j) b.qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int ii = 0; ii < 16; ++ii) sum += b.qs[16 * j + ii];
        b.bsums[j] = int16_t(sum);
      }
      b.d = 1 / iscale;
    }
    store_block(dst, i, b);
  }
}

}  // namespace opal::quant
