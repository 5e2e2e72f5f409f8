// Non-linear 4-bit quants: IQ4_NL (32-element blocks) and IQ4_XS (256-element
// super-blocks of 8 x 32). Each 4-bit index selects one of 16 fixed levels
// (kIq4nlValues, blocks.h), multiplied by the block scale.
//
//   IQ4_NL: d(f16) | qs[16]; element j in the low nibble of qs[j], j+16 in the
//           high nibble. x = d * kIq4nlValues[index].
//   IQ4_XS: d(f16) | scales_h(u16) | scales_l[4] | qs[128]. Sub-block ib (0..7)
//           has a 6-bit scale ls = low nibble of scales_l[ib/2] (ib even: bits
//           0-3, odd: 4-7) | bits 2ib..2ib+1 of scales_h << 4; its 32 elements
//           use qs[16ib..16ib+15] packed as IQ4_NL. x = d*(ls-32)*kIq4nlValues[index].
//
// The IQ4_NL quantizer is llama.cpp's (no importance matrix): weights x², start
// from the scale mapping the signed abs-max to the level -127, pick each
// element's nearest level, refit the scale by weighted least squares, try 15
// nearby starting scales, keep the best fit, and re-pick levels with it.
// IQ4_XS is dequantize-only here.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant/blocks.h"
#include "core/quant/internal.h"

namespace opal::quant {
namespace {

// Index of the level nearest to x (levels sorted ascending; ties to the upper one).
int nearest_level(float x) {
  if (x <= kIq4nlValues[0]) return 0;
  if (x >= kIq4nlValues[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kIq4nlValues[mid]) hi = mid;
    else lo = mid;
  }
  return x - kIq4nlValues[hi - 1] < kIq4nlValues[hi] - x ? hi - 1 : hi;
}

}  // namespace

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIQ4_NL>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * float(kIq4nlValues[b.qs[j] & 0xF]);
      y[j + kQK / 2] = d * float(kIq4nlValues[b.qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockIQ4_XS>(src, i);
    const float d = f16_to_f32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * float(ls - 32);
      const uint8_t* qs = b.qs + 16 * ib;
      float* y = dst + i * kQK_K + 32 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIq4nlValues[qs[j] & 0xF]);
        y[j + 16] = dl * float(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  constexpr int kTries = 7;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockIQ4_NL b{};
    b.d = f32_to_f16(0.0f);
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax >= 1e-15f) {
      float weight[kQK];
      for (int j = 0; j < kQK; ++j) weight[j] = x[j] * x[j];
      // Weighted least-squares scale for the levels picked at inverse scale id.
      auto fit = [&](float id, float* sumqx, float* sumq2) {
        *sumqx = *sumq2 = 0;
        for (int j = 0; j < kQK; ++j) {
          const float q = kIq4nlValues[nearest_level(id * x[j])];
          *sumqx += weight[j] * q * x[j];
          *sumq2 += weight[j] * q * q;
        }
      };
      float sumqx, sumq2;
      fit(1 / (-max / kIq4nlValues[0]), &sumqx, &sumq2);
      float d = sumqx / sumq2;
      float best = d * sumqx;
      for (int itry = -kTries; itry <= kTries; ++itry) {
        fit((itry + kIq4nlValues[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
      b.d = f32_to_f16(d);
      const float id = d != 0 ? 1 / d : 0;
      uint8_t L[kQK];
      for (int j = 0; j < kQK; ++j) L[j] = uint8_t(nearest_level(id * x[j]));
      for (int j = 0; j < kQK / 2; ++j) b.qs[j] = uint8_t(L[j] | (L[j + kQK / 2] << 4));
    }
    store_block(dst, i, b);
  }
}

}  // namespace opal::quant
