// Q4_0 and Q8_0 weights x Q8_0 activations with AVX-512 VNNI (512-bit vpdpbusd,
// two 32-element blocks per register).
//
// vpdpbusd multiplies unsigned by signed bytes, so each weight block is made
// unsigned by an offset: Q4_0's nibbles q in [0, 15] stand for q - 8, and a
// Q8_0 quant w becomes w + 128 (w xor 0x80). Then per 32-element block
//   sum((q - off) * x) = dpbusd(q_u8, x) - dpbusd(off, x)
// where the second term depends on the activation block only and is computed
// once per activation block per tile (as the accumulator's starting value).
// The int32 lanes are exact; each block's lanes are converted to float and
// multiplied by d_w * d_x into a float accumulator per (weight row, activation
// row) pair, summed horizontally at the end of the row.
// Tiles: 4 weight rows x 4 activation rows for prompts, 4 x 1 for decode.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

// Two blocks per 512-bit register. Q8_0 weights sit in natural order
// [block b | block b+1]; Q4_0's nibbles unpack to the 128-bit lanes
// [lo(b) | lo(b+1) | hi(b) | hi(b+1)], so its activation registers are
// rearranged the same way once per activation block pair (kSecondLanes marks
// the int32 lanes that belong to block b+1, for the scales).
struct Q4_0Weights {
  static constexpr int kBytes = kQ4_0Bytes;
  static constexpr int kOffset = 8;
  static constexpr __mmask16 kSecondLanes = 0xF0F0;
  static __m512i quants(const uint8_t* b0, const uint8_t* b1) {  // b1 may be null (odd tail)
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2));
    const __m128i v1 = b1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)) : _mm_setzero_si128();
    const __m256i v = _mm256_set_m128i(v1, v0);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0F));
  }
  static __m512i arrange_act(__m512i x) { return _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(3, 1, 2, 0)); }
};

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0Bytes;
  static constexpr int kOffset = 128;
  static constexpr __mmask16 kSecondLanes = 0xFF00;
  static __m512i quants(const uint8_t* b0, const uint8_t* b1) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i v1 = b1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)) : _mm256_set1_epi8(char(0x80));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v0), v1, 1), _mm512_set1_epi8(char(0x80)));
  }
  static __m512i arrange_act(__m512i x) { return x; }
};

__m512 scales(float d0, float d1, __mmask16 second) {
  return _mm512_mask_blend_ps(second, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
}

template <class W>
struct LegacyKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    const __m512i offset = _mm512_set1_epi8(char(W::kOffset));
    for (int64_t b = 0; b < nb; b += 2) {
      const bool pair = b + 1 < nb;  // an odd last block runs with a zero second half
      __m512i xq[RA], neg[RA];
      __m512 xd[RA];
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
        const __m256i x1 = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + kQ8_0Bytes + 2))
                                : _mm256_setzero_si256();
        xq[a] = W::arrange_act(_mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1));
        neg[a] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xq[a]));
        xd[a] = scales(load_f16(xb), pair ? load_f16(xb + kQ8_0Bytes) : 0.0f, W::kSecondLanes);
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * W::kBytes;
        const __m512i q = W::quants(wb, pair ? wb + W::kBytes : nullptr);
        const __m512 wd = scales(load_f16(wb), pair ? load_f16(wb + W::kBytes) : 0.0f, W::kSecondLanes);
        for (int a = 0; a < RA; ++a) {
          const __m512i s = _mm512_dpbusd_epi32(neg[a], q, xq[a]);
          acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, xd[a]), acc[i][a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
};

}  // namespace

void gemm_q4_0(const GemmArgs& g) { gemm_entry<LegacyKernel<Q4_0Weights>, 4, 4, 4>(g); }
void gemm_q8_0(const GemmArgs& g) { gemm_entry<LegacyKernel<Q8_0Weights>, 4, 4, 4>(g); }

}  // namespace opal::cpu::avx512
#endif  // x86
