// F32, F16 and BF16 weights with AVX-512. The activations are f32 rows already
// rounded through the weight type (llama.cpp's vec_dot type), exactly as the
// reference keeps them, so each product w * x is exact in f32 for F16/BF16
// weights; F16 weights are widened with vcvtph2ps, BF16 by a 16-bit shift.
// F32 and F16 follow llama.cpp's orders exactly as the reference does
// (kernels/llama_order.h): for >= 2 activation rows and k % 16 == 0 one
// 16-lane FMA accumulator per output (tinyBLAS; tiles of 4 weight rows x 4
// activation rows, the 16 reductions of a tile at once by reduce16x16, the
// last 1-3 activation rows in one 4 x n tile; plain loads, k % 16 == 0),
// otherwise ggml_vec_dot's 4 accumulators over steps of 64 and a tail one
// product at a time (float for F32, double for F16): 16 weight rows in the
// lanes (VecDotRows16: one reduce16x16, the F32 tail in the lanes from
// columns transposed in registers), the slice's last rows in tiles of 4 x 1. BF16:
// llama.cpp's AVX512_BF16 orders (vdpbf16ps pairs), emulated exactly with
// AVX-512F (see Bf16Pairs).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "backends/cpu/kernels/x86_avx512/reduce_avx512.h"

namespace opal::cpu::avx512 {
namespace {

struct F32Weights {
  static constexpr int kElemBytes = 4;
  static constexpr bool kDoubleTail = false;  // ggml_vec_dot_f32 sums its tail in float
  static __m512 load(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
  static __m512 load16(const uint8_t* p) { return _mm512_loadu_ps(p); }
  static float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};
struct F16Weights {
  static constexpr int kElemBytes = 2;
  static constexpr bool kDoubleTail = true;  // ggml_vec_dot_f16 sums its tail in double
  static __m512 load(const uint8_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
  static __m512 load16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
};
struct BF16Weights {
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
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    // k % 16 == 0 (gemm_llama_order): plain loads, which the compiler sees cannot
    // touch the accumulators, so they stay in registers across the loop.
    const int64_t k = g.k;
    for (int64_t e = 0; e < k; e += 16) {
      __m512 xv[RA];
      for (int a = 0; a < RA; ++a) xv[a] = _mm512_loadu_ps(x[a] + e);
      for (int i = 0; i < RW; ++i) {
        const __m512 wv = W::load16(w[i] + e * W::kElemBytes);
        for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_fmadd_ps(wv, xv[a], acc[i][a]);
      }
    }
    if constexpr (RW == 4 && RA == 4) {  // the 16 reductions at once (the same adds): block a = rows 0..3 of act a
      __m512 t[16];
      for (int i = 0; i < 4; ++i)
        for (int a = 0; a < 4; ++a) t[4 * a + i] = acc[i][a];
      const __m512 res = _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(t));
      _mm_storeu_ps(g.out + (act + 0) * g.out_stride + row, _mm512_castps512_ps128(res));
      _mm_storeu_ps(g.out + (act + 1) * g.out_stride + row, _mm512_extractf32x4_ps(res, 1));
      _mm_storeu_ps(g.out + (act + 2) * g.out_stride + row, _mm512_extractf32x4_ps(res, 2));
      _mm_storeu_ps(g.out + (act + 3) * g.out_stride + row, _mm512_extractf32x4_ps(res, 3));
    } else {
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
    }
  }
};

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
      __m512 acc[RW][4];
      for (int i = 0; i < RW; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int64_t e = 0; e < np; e += 64) {
        __m512 xv[4];
        for (int j = 0; j < 4; ++j) xv[j] = _mm512_loadu_ps(x + e + 16 * j);
        for (int i = 0; i < RW; ++i)
          for (int j = 0; j < 4; ++j)
            acc[i][j] = _mm512_fmadd_ps(W::load16(w[i] + (e + 16 * j) * W::kElemBytes), xv[j], acc[i][j]);
      }
      for (int i = 0; i < RW; ++i) {
        const float head = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][2]), _mm512_add_ps(acc[i][1], acc[i][3])));
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

// col[c] lane i = r[i] lane c: unpacks pair rows, shuffle_ps makes 4-row
// columns per 128-bit block, two rounds of shuffle_f32x4 transpose the blocks.
void transpose16(const __m512* r, __m512* col) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // per block: r0[0] r1[0] r0[1] r1[1]
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // r0[2] r1[2] r0[3] r1[3]
  }
  for (int j = 0; j < 4; ++j) {  // u[4 j + c], block L: rows 4 j .. 4 j + 3 of column 4 L + c
    u[4 * j + 0] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
    u[4 * j + 1] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0xEE);
    u[4 * j + 2] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
    u[4 * j + 3] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    col[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    col[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    col[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    col[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// ggml_vec_dot_f32 / _f16 for 16 weight rows and one activation row, the
// rows in the lanes of the result: the head's 16 combined accumulators
// (built 4 rows at a time as VecDotKernel does) are reduced at once by
// reduce16x16 (the same adds as _mm512_reduce_add_ps on each), and the F32
// tail (k % 64 elements, vec_f32_tail's order) runs in the 16 lanes: a
// column of the 16 rows (16 x 16 blocks transposed in registers) times the
// broadcast activation, a rounded
// product then a rounded add for the first (m & ~7) elements, one fused
// multiply-add for the rest. The products use the embedded-rounding multiply,
// which the compiler never contracts into the add. F16's tail sums in double
// per row as before.
template <class W>
struct VecDotRows16 {
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const float* x = reinterpret_cast<const float*>(g.act + uint64_t(act) * g.act_row_bytes);
    const uint8_t* w0 = g.w + uint64_t(row) * g.w_row_bytes;
    const int64_t np = g.k & ~int64_t(63);
    __m512 t[16];
    for (int q = 0; q < 16; q += 4) {
      const uint8_t* w[4];
      for (int i = 0; i < 4; ++i) w[i] = w0 + uint64_t(q + i) * g.w_row_bytes;
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int64_t e = 0; e < np; e += 64) {
        __m512 xv[4];
        for (int j = 0; j < 4; ++j) xv[j] = _mm512_loadu_ps(x + e + 16 * j);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            acc[i][j] = _mm512_fmadd_ps(W::load16(w[i] + (e + 16 * j) * W::kElemBytes), xv[j], acc[i][j]);
      }
      for (int i = 0; i < 4; ++i)
        t[q + i] = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][2]), _mm512_add_ps(acc[i][1], acc[i][3]));
    }
    __m512 s = _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(t));  // lane r: row + r's head
    float* out = g.out + act * g.out_stride + row;
    if constexpr (W::kDoubleTail) {
      if (np < g.k) {
        alignas(64) float head[16];
        _mm512_store_ps(head, s);
        for (int i = 0; i < 16; ++i) {
          const uint8_t* w = w0 + uint64_t(i) * g.w_row_bytes;
          double d = head[i];
          for (int64_t e = np; e < g.k; ++e) d += double(W::one(w + e * W::kElemBytes) * x[e]);
          head[i] = float(d);
        }
        s = _mm512_load_ps(head);
      }
    } else {  // F32 weights: vec_f32_tail in the lanes, on 16 x 16 blocks transposed in registers
      const float* wf = reinterpret_cast<const float*>(w0);
      const int64_t stride = int64_t(g.w_row_bytes / 4), unfused = np + ((g.k - np) & ~int64_t(7));
      for (int64_t e0 = np; e0 < g.k; e0 += 16) {
        const int64_t n = g.k - e0 < 16 ? g.k - e0 : 16;
        const __mmask16 m = __mmask16((1u << n) - 1);
        __m512 r[16], col[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_ps(m, wf + i * stride + e0);
        transpose16(r, col);
        for (int64_t c = 0; c < n; ++c) {
          const __m512 xv = _mm512_set1_ps(x[e0 + c]);
          if (e0 + c < unfused)
            s = _mm512_add_ps(s, _mm512_mul_round_ps(col[c], xv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
          else s = _mm512_fmadd_ps(col[c], xv, s);
        }
      }
    }
    _mm512_storeu_ps(out, s);
  }
};

// One activation row at a time in ggml_vec_dot's order: 16 weight rows in the
// lanes (VecDotRows16), the slice's last rows in tiles of 4 x 1 and 1 x 1.
// Activations in chunks of kActChunk as drive() takes them.
template <class W>
void drive_vec_dot(const GemmArgs& g) {
  for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
    const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
    int64_t r = g.row_begin;
    for (; r + 16 <= g.row_end; r += 16)
      for (int64_t a = a0; a < a1; ++a) VecDotRows16<W>::tile(g, r, a);
    for (; r + 4 <= g.row_end; r += 4)
      for (int64_t a = a0; a < a1; ++a) VecDotKernel<W>::template tile<4, 1>(g, r, a);
    for (; r < g.row_end; ++r)
      for (int64_t a = a0; a < a1; ++a) VecDotKernel<W>::template tile<1, 1>(g, r, a);
  }
}

// drive() for the tinyBLAS tiles with the activation remainder (1-3 rows) in
// one 4 x n tile, so that a batch of 2, 3, 5, 6 or 7 rows reads each weight
// tile twice at most (small batches: speculative verification).
template <class Kernel>
void drive_lanes(const GemmArgs& g) {
  auto tail = [&](auto rw, int64_t r, int64_t a, int64_t n) {
    constexpr int RW = decltype(rw)::value;
    if (n == 3) Kernel::template tile<RW, 3>(g, r, a);
    else if (n == 2) Kernel::template tile<RW, 2>(g, r, a);
    else if (n == 1) Kernel::template tile<RW, 1>(g, r, a);
  };
  for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
    const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
    int64_t r = g.row_begin;
    for (; r + 4 <= g.row_end; r += 4) {
      int64_t a = a0;
      for (; a + 4 <= a1; a += 4) Kernel::template tile<4, 4>(g, r, a);
      tail(std::integral_constant<int, 4>{}, r, a, a1 - a);
    }
    for (; r < g.row_end; ++r) {
      int64_t a = a0;
      for (; a + 4 <= a1; a += 4) Kernel::template tile<1, 4>(g, r, a);
      tail(std::integral_constant<int, 1>{}, r, a, a1 - a);
    }
  }
}

// llama.cpp takes tinyBLAS for >= 2 activation rows when k % 16 == 0, else ggml_vec_dot.
template <class W>
void gemm_llama_order(const GemmArgs& g) {
  if (g.n_act >= 2 && !g.single_rows && g.k % 16 == 0) drive_lanes<FloatKernel<W>>(g);
  else drive_vec_dot<W>(g);
}

// BF16 as llama.cpp's AVX512_BF16 build (vdpbf16ps, kernels/llama_order.h):
// per 32 elements, lane j adds the product of elements 2j+1, then of 2j.
// The bf16 pair of a weight dword splits exactly into two f32 values (shift /
// mask), the f32 activations are split into even and odd elements by a
// permute, and two FMAs per chunk reproduce the instruction without it.
struct Bf16Pairs {
  static __m512 even_w(__m512i d) { return _mm512_castsi512_ps(_mm512_slli_epi32(d, 16)); }
  static __m512 odd_w(__m512i d) {
    return _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(int(0xFFFF0000u))));
  }
  static void split_x(const float* x, __m512* even, __m512* odd) {
    const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *even = _mm512_permutex2var_ps(lo, ie, hi);
    *odd = _mm512_permutex2var_ps(lo, io, hi);
  }
  // acc += the 32 products of w[0..32) and x[0..32) in vdpbf16ps order.
  static __m512 step(__m512 acc, const uint8_t* w, __m512 xe, __m512 xo) {
    const __m512i d = _mm512_loadu_si512(w);
    acc = _mm512_fmadd_ps(odd_w(d), xo, acc);
    return _mm512_fmadd_ps(even_w(d), xe, acc);
  }
};

// tinyBLAS<32> for BF16: one 16-lane accumulator per output; k % 32 == 0.
struct Bf16Lanes32Kernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const uint8_t* w[RW];
    const float* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = reinterpret_cast<const float*>(g.act + uint64_t(act + a) * g.act_row_bytes);
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    for (int64_t e = 0; e < g.k; e += 32) {
      __m512 xe[RA], xo[RA];
      for (int a = 0; a < RA; ++a) Bf16Pairs::split_x(x[a] + e, &xe[a], &xo[a]);
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) acc[i][a] = Bf16Pairs::step(acc[i][a], w[i] + e * 2, xe[a], xo[a]);
    }
    if constexpr (RW == 4 && RA == 4) {  // the 16 reductions at once (the same adds): block a = rows 0..3 of act a
      __m512 t[16];
      for (int i = 0; i < 4; ++i)
        for (int a = 0; a < 4; ++a) t[4 * a + i] = acc[i][a];
      const __m512 res = _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(t));
      _mm_storeu_ps(g.out + (act + 0) * g.out_stride + row, _mm512_castps512_ps128(res));
      _mm_storeu_ps(g.out + (act + 1) * g.out_stride + row, _mm512_extractf32x4_ps(res, 1));
      _mm_storeu_ps(g.out + (act + 2) * g.out_stride + row, _mm512_extractf32x4_ps(res, 2));
      _mm_storeu_ps(g.out + (act + 3) * g.out_stride + row, _mm512_extractf32x4_ps(res, 3));
    } else {
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
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
        __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
        int64_t e = 0;
        for (; e + 64 <= g.k; e += 64) {
          __m512 xe, xo;
          Bf16Pairs::split_x(x + e, &xe, &xo);
          c1 = Bf16Pairs::step(c1, w + e * 2, xe, xo);
          Bf16Pairs::split_x(x + e + 32, &xe, &xo);
          c2 = Bf16Pairs::step(c2, w + (e + 32) * 2, xe, xo);
        }
        double s = 0.0;
        s += double(_mm512_reduce_add_ps(c1));
        s += double(_mm512_reduce_add_ps(c2));
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
  if (g.n_act >= 2 && !g.single_rows && g.k % 32 == 0) drive<Bf16Lanes32Kernel, 4, 4>(g);
  else drive<Bf16VecDotKernel, 4, 1>(g);
}

}  // namespace opal::cpu::avx512
#endif  // x86
