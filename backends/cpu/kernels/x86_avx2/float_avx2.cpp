// F32, F16 and BF16 weights with AVX2 + FMA + F16C.
// F32 and F16 reproduce llama.cpp's AVX-512 orders exactly as the reference
// and x86_avx512/float_avx512.cpp do (kernels/llama_order.h): each
// 16-lane accumulator is a pair of 8-lane registers (lanes 0-7, 8-15) and the
// final reductions follow reduce_add16. For >= 2 activation rows and
// k % 16 == 0 one 16-lane accumulator per output (tinyBLAS; register tiles of
// 4 weight rows x 3 activation rows, each k-block run once per 8-lane half:
// Lanes16Kernel), otherwise ggml_vec_dot's 4 accumulators over steps of 64
// and a scalar tail (float for F32, double for F16; tiles of 2 x 1).
// BF16: llama.cpp's AVX512_BF16 orders (vdpbf16ps pairs), emulated exactly
// (see Bf16Pairs).
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

struct F32Weights {
  static constexpr int kElemBytes = 4;
  static constexpr bool kDoubleTail = false;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};
struct F16Weights {
  static constexpr int kElemBytes = 2;
  static constexpr bool kDoubleTail = true;
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

// reduce_add16 of 16 lanes held as (lanes 0-7, lanes 8-15).
float reduce16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));
  u = _mm_add_ss(u, _mm_movehdup_ps(u));
  return _mm_cvtss_f32(u);
}

// tinyBLAS: one 16-lane accumulator per output; k % 16 == 0. A 16-lane
// accumulator is two independent 8-lane ones, lanes 0-7 (fed by elements
// 16c..16c+7 of each 16-element chunk c) and lanes 8-15 (16c+8..16c+15), so
// the tile runs each k-block of kKBlock elements twice, once per half, with
// RW x RA 8-lane accumulators in registers (a 4 x 3 tile: 12 accumulators, 3
// activation vectors, 1 weight vector), and keeps the other half's
// accumulators in memory between blocks. Every accumulator sees the same
// FMAs in the same order as with both halves side by side: the same bits.
template <class W>
struct Lanes16Kernel {
  static constexpr int64_t kKBlock = 1024;

  // acc[i][a] += the products of half h (0: lanes 0-7, 1: lanes 8-15) over [e0, e1).
  template <int RW, int RA>
  static void half_block(const uint8_t* const* w, const float* const* x, int64_t e0, int64_t e1, int h,
                         __m256 (&acc)[RW][RA]) {
    __m256 c[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) c[i][a] = acc[i][a];
    for (int64_t e = e0 + 8 * h; e < e1; e += 16) {
      __m256 xv[RA];
      for (int a = 0; a < RA; ++a) xv[a] = _mm256_loadu_ps(x[a] + e);
      for (int i = 0; i < RW; ++i) {
        const __m256 wv = W::load(w[i] + e * W::kElemBytes);
        for (int a = 0; a < RA; ++a) c[i][a] = _mm256_fmadd_ps(wv, xv[a], c[i][a]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = c[i][a];
  }

  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const uint8_t* w[RW];
    const float* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
    __m256 lo[RW][RA], hi[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) lo[i][a] = hi[i][a] = _mm256_setzero_ps();
    for (int64_t e0 = 0; e0 < g.k; e0 += kKBlock) {
      const int64_t e1 = e0 + kKBlock < g.k ? e0 + kKBlock : g.k;
      half_block<RW, RA>(w, x, e0, e1, 0, lo);
      half_block<RW, RA>(w, x, e0, e1, 1, hi);
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = reduce16(lo[i][a], hi[i][a]);
  }
};

// Register tiles of RW weight rows x RA activation rows; the last 1 to RA - 1
// activation rows of a chunk take one RW x n tile, so each weight tile is
// read at most once more per chunk.
template <class Kernel, int RW, int RA>
void drive_lanes(const GemmArgs& g) {
  auto tail = [&](auto rw, int64_t r, int64_t a, int64_t n) {
    constexpr int TW = decltype(rw)::value;
    if constexpr (RA > 3)
      if (n == 3) return Kernel::template tile<TW, 3>(g, r, a);
    if (n == 2) Kernel::template tile<TW, 2>(g, r, a);
    else if (n == 1) Kernel::template tile<TW, 1>(g, r, a);
  };
  for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
    const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
    int64_t r = g.row_begin;
    for (; r + RW <= g.row_end; r += RW) {
      int64_t a = a0;
      for (; a + RA <= a1; a += RA) Kernel::template tile<RW, RA>(g, r, a);
      tail(std::integral_constant<int, RW>{}, r, a, a1 - a);
    }
    for (; r < g.row_end; ++r) {
      int64_t a = a0;
      for (; a + RA <= a1; a += RA) Kernel::template tile<1, RA>(g, r, a);
      tail(std::integral_constant<int, 1>{}, r, a, a1 - a);
    }
  }
}

// ggml_vec_dot_f32 / _f16 for each (weight row, activation row).
template <class W>
struct VecDotKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const uint8_t* w[RW];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    const int64_t np = g.k & ~int64_t(63);
    for (int a = 0; a < RA; ++a) {
      const float* x = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
      __m256 acc[RW][8];  // 16-lane accumulator j = (acc[2j], acc[2j+1])
      for (int i = 0; i < RW; ++i)
        for (int j = 0; j < 8; ++j) acc[i][j] = _mm256_setzero_ps();
      for (int64_t e = 0; e < np; e += 64)
        for (int j = 0; j < 8; ++j) {
          const __m256 xv = _mm256_loadu_ps(x + e + 8 * j);
          for (int i = 0; i < RW; ++i)
            acc[i][j] = _mm256_fmadd_ps(W::load(w[i] + (e + 8 * j) * W::kElemBytes), xv, acc[i][j]);
        }
      for (int i = 0; i < RW; ++i) {
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][4]), _mm256_add_ps(acc[i][2], acc[i][6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[i][1], acc[i][5]), _mm256_add_ps(acc[i][3], acc[i][7]));
        const float head = reduce16(lo, hi);
        float result;
        if constexpr (W::kDoubleTail) {
          double s = head;
          for (int64_t e = np; e < g.k; ++e) s += double(W::one(w[i] + e * W::kElemBytes) * x[e]);
          result = float(s);
        } else {  // F32 weights
          result = llama_order::vec_f32_tail(head, reinterpret_cast<const float*>(w[i]) + np, x + np, g.k - np);
        }
        g.out[(act + a) * g.out_stride + row + i] = result;
      }
    }
  }
};

template <class W>
void gemm_llama_order(const GemmArgs& g) {
  if (g.n_act >= 2 && !g.single_rows && g.k % 16 == 0) drive_lanes<Lanes16Kernel<W>, 3, 4>(g);
  else drive<VecDotKernel<W>, 2, 1>(g);
}

// BF16 as llama.cpp's AVX512_BF16 build (vdpbf16ps, kernels/llama_order.h),
// as x86_avx512/float_avx512.cpp does it: a 16-lane accumulator is (lo, hi);
// per 32 elements lane j adds the product of elements 2j+1, then of 2j.
struct Bf16Pairs {
  static __m256 even_w(__m256i d) { return _mm256_castsi256_ps(_mm256_slli_epi32(d, 16)); }
  static __m256 odd_w(__m256i d) {
    return _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(int(0xFFFF0000u))));
  }
  // Even and odd elements of x[0..16).
  static void split_x(const float* x, __m256* even, __m256* odd) {
    const __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                                                   _MM_SHUFFLE(3, 1, 2, 0)));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
                                                  _MM_SHUFFLE(3, 1, 2, 0)));
  }
  // 8 lanes over 16 elements: acc += odd products, then even products.
  static __m256 step8(__m256 acc, const uint8_t* w, const float* x) {
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    __m256 xe, xo;
    split_x(x, &xe, &xo);
    acc = _mm256_fmadd_ps(odd_w(d), xo, acc);
    return _mm256_fmadd_ps(even_w(d), xe, acc);
  }
};

// tinyBLAS<32> for BF16; k % 32 == 0.
struct Bf16Lanes32Kernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    for (int a = 0; a < RA; ++a) {
      const float* x = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
      for (int i = 0; i < RW; ++i) {
        const uint8_t* w = g.w + uint64_t(row + i) * g.w_row_bytes;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int64_t e = 0; e < g.k; e += 32) {
          lo = Bf16Pairs::step8(lo, w + e * 2, x + e);
          hi = Bf16Pairs::step8(hi, w + (e + 16) * 2, x + e + 16);
        }
        g.out[(act + a) * g.out_stride + row + i] = reduce16(lo, hi);
      }
    }
  }
};

// ggml_vec_dot_bf16 (AVX512_BF16): two accumulators over steps of 64, tail in double.
struct Bf16VecDotKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    for (int a = 0; a < RA; ++a) {
      const float* x = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
      for (int i = 0; i < RW; ++i) {
        const uint8_t* w = g.w + uint64_t(row + i) * g.w_row_bytes;
        __m256 c1lo = _mm256_setzero_ps(), c1hi = c1lo, c2lo = c1lo, c2hi = c1lo;
        int64_t e = 0;
        for (; e + 64 <= g.k; e += 64) {
          c1lo = Bf16Pairs::step8(c1lo, w + e * 2, x + e);
          c1hi = Bf16Pairs::step8(c1hi, w + (e + 16) * 2, x + e + 16);
          c2lo = Bf16Pairs::step8(c2lo, w + (e + 32) * 2, x + e + 32);
          c2hi = Bf16Pairs::step8(c2hi, w + (e + 48) * 2, x + e + 48);
        }
        double s = 0.0;
        s += double(reduce16(c1lo, c1hi));
        s += double(reduce16(c2lo, c2hi));
        for (; e < g.k; ++e) s += double(BF16Weights::one(w + e * 2) * x[e]);
        g.out[(act + a) * g.out_stride + row + i] = float(s);
      }
    }
  }
};

}  // namespace

void gemm_f32(const GemmArgs& g) { gemm_llama_order<F32Weights>(g); }
void gemm_f16(const GemmArgs& g) { gemm_llama_order<F16Weights>(g); }
void gemm_bf16(const GemmArgs& g) {
  if (g.n_act >= 2 && !g.single_rows && g.k % 32 == 0) drive<Bf16Lanes32Kernel, 2, 1>(g);
  else drive<Bf16VecDotKernel, 2, 1>(g);
}

}  // namespace opal::cpu::avx2
#endif  // x86
