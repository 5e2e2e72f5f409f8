// Q4_0 and Q8_0 weights x Q8_0 activations with AVX-512 VNNI (256-bit vpdpbusd).
//
// vpdpbusd multiplies unsigned by signed bytes, so each weight block is made
// unsigned by an offset: Q4_0's nibbles q in [0, 15] stand for q - 8, and a
// Q8_0 quant w becomes w + 128 (w xor 0x80). Then per 32-element block
//   sum((q - off) * x) = dpbusd(q_u8, x) - dpbusd(off, x)
// where the second term depends on the activation block only and is computed
// once per activation block per tile (as the accumulator's starting value).
// The int32 lanes are exact; each block's 8 lanes are converted to float and
// multiplied by d_w * d_x into a float accumulator per (weight row, activation
// row) pair, summed horizontally at the end of the row.
// The per-block 8-lane float accumulation is llama.cpp's order for these
// types on x86 (its AVX2/VNNI vec_dot); a 512-bit two-block variant was
// faster for prompts but moved near-tie greedy choices off llama.cpp's.
// Tiles: 4 weight rows x 4 activation rows for prompts, 4 x 1 for decode.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Q4_0Weights {
  static constexpr int kBytes = kQ4_0Bytes;
  static constexpr int kOffset = 8;
  static __m256i quants(const uint8_t* blk) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);  // elements 0-15 low nibbles, 16-31 high
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
};

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0Bytes;
  static constexpr int kOffset = 128;
  static __m256i quants(const uint8_t* blk) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(char(0x80)));
  }
};

template <class W>
struct LegacyKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m256 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm256_setzero_ps();
    const __m256i offset = _mm256_set1_epi8(char(W::kOffset));
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xq[RA], neg[RA];
      __m256 xd[RA];
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        xq[a] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
        neg[a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, xq[a]));
        xd[a] = _mm256_set1_ps(load_f16(xb));
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * W::kBytes;
        const __m256i q = W::quants(wb);
        const __m256 wd = _mm256_set1_ps(load_f16(wb));
        for (int a = 0; a < RA; ++a) {
          const __m256i s = _mm256_dpbusd_epi32(neg[a], q, xq[a]);
          acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, xd[a]), acc[i][a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = hsum8(acc[i][a]);
  }
};

}  // namespace

void gemm_q4_0(const GemmArgs& g) { gemm_entry<LegacyKernel<Q4_0Weights>, 4, 4, 4>(g); }
void gemm_q8_0(const GemmArgs& g) { gemm_entry<LegacyKernel<Q8_0Weights>, 4, 4, 4>(g); }

}  // namespace opal::cpu::avx512
#endif  // x86
