// Activation quantization with NEON, byte-identical to core/quant's reference:
//   Q8_0: as llama.cpp's x86 path (core/quant/activation.h): id = 127/amax,
//         q = round-to-nearest-even(x * id): fcvtns.
//   Q8_K: q = min(127, round-to-nearest-even(iscale * x)): fcvtns.
// amax / max / d / iscale are computed as in the reference (see
// x86_avx512/act_avx512.cpp for the formulas).
#if defined(__aarch64__)
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/arm_neon/kernels_neon.h"

namespace opal::cpu::neon {

void convert_q8_0(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32, dst += 34) {
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; ++i) {
      v[i] = vld1q_f32(x + 4 * i);
      m = vmaxq_f32(m, vabsq_f32(v[i]));
    }
    const float amax = vmaxvq_f32(m);
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __fp16 dh = __fp16(d);  // round to nearest even, as f32_to_f16
    std::memcpy(dst, &dh, 2);
    int8_t q[32];
    for (int i = 0; i < 8; i += 2) {
      const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[i], id)), c = vcvtnq_s32_f32(vmulq_n_f32(v[i + 1], id));
      const int16x8_t s16 = vcombine_s16(vmovn_s32(a), vmovn_s32(c));
      vst1_s8(q + 4 * i, vmovn_s16(s16));
    }
    std::memcpy(dst + 2, q, 32);
  }
}

void convert_q8_K(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256, dst += 292) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 64; ++i) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * i)));
    const float amax = vmaxvq_f32(m);
    if (!(amax != 0.0f)) {
      std::memset(dst, 0, 292);
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < 256; ++j)  // the first element whose |x| is amax, with its sign
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    const float iscale = -127.0f / max;
    int8_t q[256];
    int16_t bsums[16];
    for (int i = 0; i < 16; ++i) {
      int32x4_t s = vdupq_n_s32(0);
      for (int j = 0; j < 4; j += 2) {
        const int32x4_t a =
            vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * i + 4 * j), iscale)), vdupq_n_s32(127));
        const int32x4_t c =
            vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * i + 4 * j + 4), iscale)), vdupq_n_s32(127));
        s = vaddq_s32(s, vaddq_s32(a, c));
        vst1_s8(q + 16 * i + 4 * j, vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(c))));
      }
      bsums[i] = int16_t(vaddvq_s32(s));
    }
    const float d = 1 / iscale;
    std::memcpy(dst, &d, 4);
    std::memcpy(dst + 4, q, 256);
    std::memcpy(dst + 260, bsums, 32);
  }
}

}  // namespace opal::cpu::neon
#endif  // __aarch64__
