// F32, F16 and BF16 weights with AVX2 + FMA + F16C: as
// x86_avx512/float_avx512.cpp on 8 lanes; the k % 8 tail is summed in scalar.
// Tiles: 2 weight rows x 4 activation rows for prompts, 4 x 1 for decode.
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>

#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

struct F32Weights {
  static constexpr int kElemBytes = 4;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};
struct F16Weights {
  static constexpr int kElemBytes = 2;
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
};
struct BF16Weights {
  static constexpr int kElemBytes = 2;
  static __m256 load(const uint8_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
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
    __m256 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm256_setzero_ps();
    const int64_t k8 = g.k / 8 * 8;
    for (int64_t e = 0; e < k8; e += 8) {
      __m256 xv[RA];
      for (int a = 0; a < RA; ++a) xv[a] = _mm256_loadu_ps(x[a] + e);
      for (int i = 0; i < RW; ++i) {
        const __m256 wv = W::load(w[i] + e * W::kElemBytes);
        for (int a = 0; a < RA; ++a) acc[i][a] = _mm256_fmadd_ps(wv, xv[a], acc[i][a]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) {
        float tail = 0.0f;
        for (int64_t e = k8; e < g.k; ++e) tail += W::one(w[i] + e * W::kElemBytes) * x[a][e];
        g.out[(act + a) * g.out_stride + row + i] = hsum8(acc[i][a]) + tail;
      }
  }
};

}  // namespace

void gemm_f32(const GemmArgs& g) { gemm_entry<FloatKernel<F32Weights>, 2, 4, 4>(g); }
void gemm_f16(const GemmArgs& g) { gemm_entry<FloatKernel<F16Weights>, 2, 4, 4>(g); }
void gemm_bf16(const GemmArgs& g) { gemm_entry<FloatKernel<BF16Weights>, 2, 4, 4>(g); }

}  // namespace opal::cpu::avx2
#endif  // x86
