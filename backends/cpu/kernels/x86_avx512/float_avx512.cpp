// F32, F16 and BF16 weights with AVX-512. The activations are f32 rows already
// rounded through the weight type (llama.cpp's vec_dot type), exactly as the
// reference keeps them, so each product w * x is exact in f32 for F16/BF16
// weights; F16 weights are widened with vcvtph2ps, BF16 by a 16-bit shift.
// Accumulation is f32 FMA per 16 lanes (the reference accumulates in double:
// results differ by float rounding only). A row tail of k % 16 uses masked loads.
// Tiles: 4 weight rows x 4 activation rows for prompts, 4 x 1 for decode.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {

struct F32Weights {
  static constexpr int kElemBytes = 4;
  static __m512 load(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16Weights {
  static constexpr int kElemBytes = 2;
  static __m512 load(const uint8_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct BF16Weights {
  static constexpr int kElemBytes = 2;
  static __m512 load(const uint8_t* p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
};

template <class W>
struct FloatKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const uint8_t* w[RW];
    const float* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    for (int64_t e = 0; e < g.k; e += 16) {
      const __mmask16 m = g.k - e >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (g.k - e)) - 1);
      __m512 xv[RA];
      for (int a = 0; a < RA; ++a) xv[a] = _mm512_maskz_loadu_ps(m, x[a] + e);
      for (int i = 0; i < RW; ++i) {
        const __m512 wv = W::load(w[i] + e * W::kElemBytes, m);
        for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_fmadd_ps(wv, xv[a], acc[i][a]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
};

}  // namespace

void gemm_f32(const GemmArgs& g) { gemm_entry<FloatKernel<F32Weights>, 4, 4, 4>(g); }
void gemm_f16(const GemmArgs& g) { gemm_entry<FloatKernel<F16Weights>, 4, 4, 4>(g); }
void gemm_bf16(const GemmArgs& g) { gemm_entry<FloatKernel<BF16Weights>, 4, 4, 4>(g); }

}  // namespace opal::cpu::avx512
#endif  // x86
