// Activation quantization with AVX2, byte-identical to core/quant's reference
// quantizers; the arithmetic is that of x86_avx512/act_avx512.cpp (see there).
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>

#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {

void convert_q8_0(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32, dst += 34) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      m = _mm256_max_ps(m, abs_ps(v[i]));
    }
    const float amax = hmax8(m);
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t dh = uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));  // as f32_to_f16
    std::memcpy(dst, &dh, 2);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));  // nearest even
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2), pack_epi32_to_epi8(q[0], q[1], q[2], q[3]));
  }
}

void convert_q8_K(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256, dst += 292) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * i)));
    const float amax = hmax8(m);
    if (!(amax != 0.0f)) {
      std::memset(dst, 0, 292);
      continue;
    }
    float max = 0.0f;
    for (int i = 0; i < 32; ++i) {  // the first element whose |x| is amax, with its sign
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit) {
        max = x[8 * i + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    int16_t bsums[16];
    for (int i = 0; i < 8; ++i) {  // 32 elements per step
      __m256i q[4];
      for (int j = 0; j < 4; ++j)
        q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * i + 8 * j))),
                                _mm256_set1_epi32(127));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 + 32 * i), pack_epi32_to_epi8(q[0], q[1], q[2], q[3]));
      bsums[2 * i] = int16_t(hsum8_epi32(_mm256_add_epi32(q[0], q[1])));
      bsums[2 * i + 1] = int16_t(hsum8_epi32(_mm256_add_epi32(q[2], q[3])));
    }
    const float d = 1 / iscale;
    std::memcpy(dst, &d, 4);
    std::memcpy(dst + 260, bsums, 32);
  }
}

void round_f16(const float* x, float* out, int64_t k) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  for (; i < k; ++i) out[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace opal::cpu::avx2
#endif  // x86
