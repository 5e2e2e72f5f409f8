// Activation quantization with AVX-512, byte-identical to core/quant's
// reference quantizers (tests/kernels compares the bytes):
//   Q8_0: as llama.cpp's x86 quantize_row_q8_0 (core/quant/activation.h):
//         d = amax/127, id = 127/amax, q = round-to-nearest-even(x*id).
//         The "sums" form appends, after the row's blocks, each block's d as
//         f32 and then each block's sum of quants as int32 (the Q4_0
//         prompt kernel's corrections; legacy_avx512.cpp). The "flipped"
//         form (Q8_0 weights) appends to that the quants as unsigned bytes,
//         x + 128 (x xor 0x80), 32 a block: the operand Q8_0LlamaLanes'
//         vpdpbusd takes, made once per row instead of once per weight slice.
//   Q8_K: max = the first element of largest |x| (signed), iscale = -127/max,
//         q = min(127, round-to-nearest-even(iscale*x)), d = 1/iscale, and
//         bsums = the sums of each 16 quants.
// The products x*id and iscale*x are single roundings, as in the reference;
// vcvtps2dq rounds to nearest even (the default MXCSR mode).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

__m512 abs_ps(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

}  // namespace

void convert_q8_0(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32, dst += 34) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_ps(v0), abs_ps(v1)));
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t dh = uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));  // as f32_to_f16
    std::memcpy(dst, &dh, 2);
    const __m512 idv = _mm512_set1_ps(id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, idv))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 18),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, idv))));
  }
}

void convert_q8_0_sums(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  convert_q8_0(act_type, x, dst, k);
  const int64_t nb = k / 32;
  uint8_t* tail = dst + nb * 34;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = dst + b * 34;
    const float d = _cvtsh_ss(uint16_t(blk[0] | (blk[1] << 8)));
    const __m512i q = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_madd_epi16(q, _mm512_set1_epi16(1)));
    std::memcpy(tail + 4 * b, &d, 4);
    std::memcpy(tail + 4 * (nb + b), &sum, 4);
  }
}

void convert_q8_0_flipped(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  convert_q8_0_sums(act_type, x, dst, k);
  const int64_t nb = k / 32;
  uint8_t* flipped = dst + q8_0_sums_row_bytes(k);
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  for (int64_t b = 0; b < nb; ++b)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(flipped + 32 * b),
                        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + b * 34 + 2)), flip));
}

uint64_t q8_0_flipped_row_bytes(int64_t k) { return q8_0_sums_row_bytes(k) + uint64_t(k / 32) * 32; }

void convert_q8_K(DType, const float* x, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256, dst += 292) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) m = _mm512_max_ps(m, abs_ps(_mm512_loadu_ps(x + 16 * i)));
    const float amax = _mm512_reduce_max_ps(m);
    if (!(amax != 0.0f)) {  // all zero (or NaN-only): the reference leaves the block zeroed
      std::memset(dst, 0, 292);
      continue;
    }
    float max = 0.0f;
    for (int i = 0; i < 16; ++i) {  // the first element whose |x| is amax, with its sign
      const __mmask16 hit = _mm512_cmp_ps_mask(abs_ps(_mm512_loadu_ps(x + 16 * i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (hit) {
        max = x[16 * i + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 is = _mm512_set1_ps(iscale);
    int16_t bsums[16];
    for (int i = 0; i < 16; ++i) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * i)));  // nearest even (MXCSR default)
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 4 + 16 * i), _mm512_cvtepi32_epi8(q));
      bsums[i] = int16_t(_mm512_reduce_add_epi32(q));
    }
    const float d = 1 / iscale;
    std::memcpy(dst, &d, 4);
    std::memcpy(dst + 260, bsums, 32);
  }
}

void round_f16(const float* x, float* out, int64_t k) {
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (k - i)) - 1);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(h));
  }
}

}  // namespace opal::cpu::avx512
#endif  // x86
