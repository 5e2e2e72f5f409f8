// Q5_0 and Q8_0 weights x Q8_0 activations with AVX2 (Q4_0: q4_0_avx2.cpp).
//
// Per 32-element block and (weight row, activation row) pair, the exact int32
// dot product comes from vpmaddubsw (u8 x s8 -> int16 pair sums) and vpmaddwd
// (pairs -> int32):
//   Q5_0: q in [0, 31] stands for q - 16:
//         pairs(q, x) - pairs(16, x)   (both <= 7874 in magnitude: no saturation)
//   Q8_0: signed weights: pairs(|w|, x * sign(w))  (<= 2 * 128 * 127)
// Q5_0 / Q8_0: the 8 int32 lanes are converted to float and multiplied by
// d_w * d_x into a float accumulator per pair, summed horizontally at the end
// of the row (llama.cpp's vec_dot order).
// Tiles for prompts: Q8_0 4 weight rows in the lanes x 2 activation rows
// (q8_0_llama_lanes.h with Avx2LaneDot, repacked per call from the GGUF
// layout or the load-time row groups; without a scratch the one-pair-a-vector
// tiles of q8_0_llama_tiles.h, the same bits; activation rows are
// convert_q8_0_sums rows, f32 block scales after the blocks), Q5_0 2 x 2;
// decode 8 rows per step (LegacyDecode). Q8_0 batches of more than 16 rows in
// the lanes order (--batch-order lanes): Q8_0Lanes, weight rows in the lanes;
// Q5_0 in the lanes order (auto and lanes; since stop 25 at every batch size,
// decode included: q5_0_block_exact): Q5_0Lanes (block-exact order, on
// convert_q8_0_sums activation rows).
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/q8_0_llama_lanes.h"
#include "backends/cpu/kernels/x86_avx2/q8_0_llama_tiles.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

// Q5_0: the nibbles as Q4_0 plus bit j of qh as bit 4 of element j; q - 16.
struct Q5_0Weights {
  static constexpr int kBytes = 22;
  struct Act {
    __m256i x, c16;
  };
  struct W {
    __m256i q;
  };
  static Act act(__m256i x) { return {x, _mm256_maddubs_epi16(_mm256_set1_epi8(16), x)}; }
  static W load(const uint8_t* blk) { return {q5_0_quants(blk)}; }
  static __m256i dot(const W& w, const Act& a) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(w.q, a.x), a.c16), ones16());
  }
};

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0Bytes;
  struct Act {
    __m256i x;
  };
  struct W {
    __m256i q, abs;
  };
  static Act act(__m256i x) { return {x}; }
  static W load(const uint8_t* blk) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    return {q, _mm256_abs_epi8(q)};
  }
  static __m256i dot(const W& w, const Act& a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(a.x, w.q)), ones16());
  }
};

template <class T>
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
    for (int64_t b = 0; b < nb; ++b) {
      typename T::Act xa[RA];
      __m256 xd[RA];
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        xa[a] = T::act(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
        xd[a] = _mm256_set1_ps(load_f16(xb));
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * T::kBytes;
        const typename T::W q = T::load(wb);
        const __m256 wd = _mm256_set1_ps(load_f16(wb));
        for (int a = 0; a < RA; ++a)
          acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T::dot(q, xa[a])), _mm256_mul_ps(wd, xd[a]), acc[i][a]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = hsum8(acc[i][a]);
  }
};

short f16_bits(const uint8_t* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}

// Decode (one activation row): 8 weight rows per step, each row with its own
// 8-lane accumulator in the order above (same results); the 8 rows' block
// scales are converted together (vcvtph2ps), multiplied by d_x and spread by
// vpermps, and the rows 16 on (two steps) are prefetched as one span, a share
// of its lines per block.
template <class T>
struct LegacyDecode {
  // Block b's share of the lines of the rows two steps on (next).
  static void prefetch_share(const uint8_t* next, int64_t b, int lines_per_step, bool to_l2) {
    for (int l = 0; l < lines_per_step; ++l) {
      const char* p = reinterpret_cast<const char*>(next + (b * lines_per_step + l) * 64);
      if (to_l2) _mm_prefetch(p, _MM_HINT_T1);
      else _mm_prefetch(p, _MM_HINT_T0);
    }
  }
  // The 8 rows' block scales (rows rb bytes apart from wb) times the activation block's d.
  static __m256 scales8(const uint8_t* wb, uint64_t rb, const uint8_t* xb) {
    const __m128i h =
        _mm_setr_epi16(f16_bits(wb), f16_bits(wb + rb), f16_bits(wb + 2 * rb), f16_bits(wb + 3 * rb),
                       f16_bits(wb + 4 * rb), f16_bits(wb + 5 * rb), f16_bits(wb + 6 * rb), f16_bits(wb + 7 * rb));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(load_f16(xb)));
  }

  // x: one activation row, out: its output row; prefetch: request the rows
  // two steps on (the first activation row of a step only).
  static void rows8(const GemmArgs& g, const uint8_t* x, float* out, int64_t row, bool prefetch) {
    const int64_t nb = g.k / 32;
    const uint64_t rb = g.w_row_bytes;
    const uint8_t* w0 = g.w + uint64_t(row) * rb;
    const uint8_t* next = w0 + 16 * rb;
    const int lines_per_step = int((8 * rb + 64 * nb - 1) / (64 * nb));
    const bool to_l2 = 16 * rb > 32 * 1024;
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* xb = x + b * kQ8_0Bytes;
      const typename T::Act xa = T::act(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
      const uint8_t* wb = w0 + uint64_t(b) * T::kBytes;
      if (prefetch) prefetch_share(next, b, lines_per_step, to_l2);
      const __m256 d = scales8(wb, rb, xb);
      for (int i = 0; i < 8; ++i) {
        const typename T::W q = T::load(wb + i * rb);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T::dot(q, xa)), _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(i)),
                                 acc[i]);
      }
    }
    for (int i = 0; i < 8; ++i) out[row + i] = hsum8(acc[i]);
  }

  // The block-exact order (Q5_0 where q5_0_block_exact, stop 25): the 8 rows'
  // block dots (8 exact int32 lanes each) summed across their lanes together
  // (three vphaddd rounds and one cross-half add: exact, so any order), then
  // acc = fma(float(isum), d_w * d_x, acc) for the 8 rows at once, acc the
  // result: Q5_0Lanes' bits.
  static void rows8_exact(const GemmArgs& g, const uint8_t* x, float* out, int64_t row, bool prefetch) {
    const int64_t nb = g.k / 32;
    const uint64_t rb = g.w_row_bytes;
    const uint8_t* w0 = g.w + uint64_t(row) * rb;
    const uint8_t* next = w0 + 16 * rb;
    const int lines_per_step = int((8 * rb + 64 * nb - 1) / (64 * nb));
    const bool to_l2 = 16 * rb > 32 * 1024;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* xb = x + b * kQ8_0Bytes;
      const typename T::Act xa = T::act(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
      const uint8_t* wb = w0 + uint64_t(b) * T::kBytes;
      if (prefetch) prefetch_share(next, b, lines_per_step, to_l2);
      const __m256 d = scales8(wb, rb, xb);
      __m256i v[8];
      for (int i = 0; i < 8; ++i) v[i] = T::dot(T::load(wb + i * rb), xa);
      const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
      const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
      const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                            _mm256_permute2x128_si256(h0, h1, 0x31));  // rows 0-7
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
    }
    _mm256_storeu_ps(out + row, acc);
  }

  // Decode, and small batches: each step of 8 weight rows meets every
  // activation row in turn while its rows stay in L1 (fetched from memory
  // once, by the first activation row's prefetches), so a batch of a few rows
  // streams the weights once, as decode does; every (row, activation) pair
  // keeps its order, so the results are those of the prompt tiles.
  static void run(const GemmArgs& g) {
    int64_t r = g.row_begin;
    const uint8_t* first = g.w + uint64_t(r) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(g.row_end - r), 16) * g.w_row_bytes;
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    for (; r + 8 <= g.row_end; r += 8)
      for (int64_t a = 0; a < g.n_act; ++a)
        rows8(g, g.act + uint64_t(a) * g.act_row_bytes, g.out + a * g.out_stride, r, a == 0);
    for (; r < g.row_end; ++r)
      for (int64_t a = 0; a < g.n_act; ++a) LegacyKernel<T>::template tile<1, 1>(g, r, a);
  }

  // The same walk in the block-exact order; the rows after the last step of 8
  // through rest (the same order).
  static void run_exact(const GemmArgs& g, void (*rest)(const GemmArgs&)) {
    int64_t r = g.row_begin;
    const uint8_t* first = g.w + uint64_t(r) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(g.row_end - r), 16) * g.w_row_bytes;
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    for (; r + 8 <= g.row_end; r += 8)
      for (int64_t a = 0; a < g.n_act; ++a)
        rows8_exact(g, g.act + uint64_t(a) * g.act_row_bytes, g.out + a * g.out_stride, r, a == 0);
    if (r < g.row_end) {
      GemmArgs tail = g;
      tail.row_begin = r;
      rest(tail);
    }
  }
};

// Small batches (2-16 rows): LegacyKernel's 4 x 2 tiles over steps of 4
// weight rows, each step meeting every activation row while its rows are in
// L1, and the rows two steps on requested as one span before each step (the
// tiles alone have no prefetch and waited on memory).
template <class T>
void small_batch(const GemmArgs& g) {
  constexpr int kRows = 4;
  int64_t r = g.row_begin;
  for (; r + kRows <= g.row_end; r += kRows) {
    const uint8_t* ahead = g.w + uint64_t(r + 2 * kRows) * g.w_row_bytes;
    for (uint64_t o = 0; o < kRows * g.w_row_bytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
    int64_t a = 0;
    for (; a + 2 <= g.n_act; a += 2) LegacyKernel<T>::template tile<kRows, 2>(g, r, a);
    if (a < g.n_act) LegacyKernel<T>::template tile<kRows, 1>(g, r, a);
  }
  for (; r < g.row_end; ++r)
    for (int64_t a = 0; a < g.n_act; ++a) LegacyKernel<T>::template tile<1, 1>(g, r, a);
}

// Q8_0 batches in the lanes order (batch_order() == lanes): weight rows
// in the int32 lanes. Each slice of 16 weight rows is repacked once per call
// into the thread's scratch: per block, the 16 rows' scales as f32, then the
// signed quants grouped by 4 elements, [group 0..7][row 0..15][4 bytes]. Per
// group, one vector holds 8 rows' 4 quants w, and an activation row's 4 quants
// x (broadcast) meet them as vpmaddubsw(|w|, sign(x, w)) (pairs <= 2 * 128 *
// 127, no saturation) and vpmaddwd by ones: the 8 rows' exact int32 group
// sums, added over the block's 8 groups. Then one convert and FMA per block
// serve 8 (row, activation) pairs: acc = fma(float(isum), d_w * d_x, acc), the
// AVX-512 lanes kernel's order (the same bits). Tiles: 16 rows x 4 activation
// rows, one 8-row vector at a time (the int32 sums of 4 activation rows in
// registers, the float accumulators in the output, updated once per block).
struct Q8_0Lanes {
  static constexpr int kSlice = 16;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants
  static constexpr int kActs = 4;

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* scales = reinterpret_cast<float*>(pb);
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kSlice * 4);
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {  // zero rows up to the slice
          scales[r] = 0.0f;
          for (int grp = 0; grp < 8; ++grp) q[grp * kSlice + r] = 0;
          continue;
        }
        const uint8_t* blk = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ8_0Bytes;
        scales[r] = load_f16(blk);
        for (int grp = 0; grp < 8; ++grp) std::memcpy(&q[grp * kSlice + r], blk + 2 + 4 * grp, 4);
      }
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out16[]) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    // The float accumulators live in the output (updated once per block).
    for (int a = 0; a < RA; ++a) std::memset(out16[a], 0, sizeof(float) * kSlice);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      __m256 xd[RA];
      for (int a = 0; a < RA; ++a) xd[a] = _mm256_set1_ps(load_f16(x[a] + b * kQ8_0Bytes));
      for (int v = 0; v < 2; ++v) {
        __m256i iacc[RA];
        for (int a = 0; a < RA; ++a) iacc[a] = _mm256_setzero_si256();
        for (int grp = 0; grp < 8; ++grp) {
          const __m256i w =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + kSlice * 4 + (grp * kSlice + 8 * v) * 4));
          const __m256i aw = _mm256_abs_epi8(w);
          for (int a = 0; a < RA; ++a) {
            int32_t four;
            std::memcpy(&four, x[a] + b * kQ8_0Bytes + 2 + 4 * grp, 4);
            const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(four), w));
            iacc[a] = in_register(_mm256_add_epi32(iacc[a], _mm256_madd_epi16(p, ones16())));
          }
        }
        const __m256 wd = _mm256_loadu_ps(reinterpret_cast<const float*>(pb) + 8 * v);
        for (int a = 0; a < RA; ++a)
          _mm256_storeu_ps(out16[a] + 8 * v, _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[a]), _mm256_mul_ps(wd, xd[a]),
                                                             _mm256_loadu_ps(out16[a] + 8 * v)));
      }
    }
  }
};

// Q5_0 batches in the lanes order (batch_order() == lanes): weight rows in the int32
// lanes, each block's exact sum, then acc = fma(float(isum), d_w * d_x, acc)
// (the block-exact order of q4_0_avx2.cpp's RowsInLanes). Activation rows are
// convert_q8_0_sums rows (the Q8_0 blocks, then each block's d as f32 and its
// sum of quants as int32). Each slice of 16 weight rows is repacked once per
// call into the thread's scratch: per block, the 16 rows' scales as f32, then
// the 5-bit quants q in [0, 31] (standing for q - 16) grouped by 4 elements,
// [group 0..7][row 0..15][4 bytes]. vpmaddubsw of a group with one activation
// row's 4 quants (broadcast) gives int16 pairs of at most 2 * 31 * 128 = 7936,
// so 4 groups add in int16 (31744) before one vpmaddwd by ones; the two halves
// of the block and -16 * sum(x) make the exact int32 block sum.
struct Q5_0Lanes {
  static constexpr int kSlice = 16;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants
  static constexpr int kActs = 3;

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    if (g.layout == kLayoutQ5Groups8) return q5_0_groups_to_lanes(g, row, rows, kSlice, kBlockBytes, packed);
    const int64_t nb = g.k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* scales = reinterpret_cast<float*>(pb);
      alignas(32) uint32_t tmp[kSlice][8];  // a row's 32 quants as 8 groups of 4
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {
          scales[r] = 0.0f;
          std::memset(tmp[r], 0, sizeof tmp[r]);
          continue;
        }
        const uint8_t* blk = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * Q5_0Weights::kBytes;
        scales[r] = load_f16(blk);
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[r]), Q5_0Weights::load(blk).q);
      }
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kSlice * 4);
      for (int grp = 0; grp < 8; ++grp)
        for (int r = 0; r < kSlice; ++r) q[grp * kSlice + r] = tmp[r][grp];
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out16[]) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    const uint64_t scales_at = uint64_t(nb) * kQ8_0Bytes, sums_at = scales_at + uint64_t(nb) * 4;
    // The float accumulators live in the output (updated once per block), so
    // each weight vector is loaded once per group.
    for (int a = 0; a < RA; ++a) std::memset(out16[a], 0, sizeof(float) * kSlice);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const uint8_t* pq = pb + kSlice * 4;
      __m256i isum[2][RA];
      for (int a = 0; a < RA; ++a) {
        int32_t sum;
        std::memcpy(&sum, x[a] + sums_at + 4 * b, 4);
        isum[0][a] = isum[1][a] = _mm256_set1_epi32(-16 * sum);
      }
      for (int half = 0; half < 2; ++half) {
        __m256i i16[2][RA];
        for (int u = 0; u < 4; ++u) {
          const int grp = 4 * half + u;
          const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + grp * kSlice * 4));
          const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + grp * kSlice * 4 + 32));
          for (int a = 0; a < RA; ++a) {
            int32_t four;
            std::memcpy(&four, x[a] + b * kQ8_0Bytes + 2 + 4 * grp, 4);
            const __m256i xb = _mm256_set1_epi32(four);
            const __m256i p0 = _mm256_maddubs_epi16(w0, xb), p1 = _mm256_maddubs_epi16(w1, xb);
            i16[0][a] = u == 0 ? p0 : in_register(_mm256_add_epi16(i16[0][a], p0));
            i16[1][a] = u == 0 ? p1 : in_register(_mm256_add_epi16(i16[1][a], p1));
          }
        }
        for (int a = 0; a < RA; ++a) {
          isum[0][a] = _mm256_add_epi32(isum[0][a], _mm256_madd_epi16(i16[0][a], ones16()));
          isum[1][a] = _mm256_add_epi32(isum[1][a], _mm256_madd_epi16(i16[1][a], ones16()));
        }
      }
      const __m256 wd0 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb));
      const __m256 wd1 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb) + 8);
      for (int a = 0; a < RA; ++a) {
        float xd;
        std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
        const __m256 xdv = _mm256_set1_ps(xd);
        _mm256_storeu_ps(out16[a], _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[0][a]), _mm256_mul_ps(wd0, xdv),
                                                   _mm256_loadu_ps(out16[a])));
        _mm256_storeu_ps(out16[a] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[1][a]), _mm256_mul_ps(wd1, xdv),
                                                       _mm256_loadu_ps(out16[a] + 8)));
      }
    }
  }
};

}  // namespace

int64_t q8_0_scratch_floats(int64_t k) { return k / 32 * Q8_0Lanes::kBlockBytes / 4 + 8; }

// Q5_0 in the block-exact order (q5_0_block_exact: the lanes order selected,
// stop 25) takes Q5_0Lanes at every batch size, as the row groups' decode
// kernel does (q5_0_groups.h; the plain layout serves --no-repack, the rows
// past the last group and weights that are not repacked). In llama.cpp's order
// (--batch-order llama, expert rows) batches of up to kSmallBatch rows take the
// decode kernel (weights streamed once, with prefetch), larger ones the 2 x 2
// tiles, which need fewer instructions per pair and win once the batch is
// compute-bound (measured on Q8_0: pp2 1.9x faster on the decode kernel,
// pp4-pp16 no better). Q8_0 batches of 2-16 rows take small_batch (4 x 2 tiles
// with prefetch: batch2/4 GB/s 1.1-1.3x the decode kernel's); its small batches
// and expert rows (single_rows) keep llama.cpp's order on every path.
constexpr int64_t kSmallBatch = 3;
constexpr int64_t kLanesFrom = 17;

int64_t q5_0_scratch_floats(int64_t k) { return k / 32 * Q5_0Lanes::kBlockBytes / 4 + 8; }

bool lanes_batch(const GemmArgs& g, DType weight_type) {
  return g.n_act >= kLanesFrom && !g.single_rows && g.scratch != nullptr && lanes_order(weight_type);
}

bool q5_0_block_exact(const GemmArgs& g) { return !g.single_rows && g.scratch != nullptr && lanes_order(DType::Q5_0); }

static void q5_0_lanes(const GemmArgs& g) { SliceDriver<Q5_0Lanes>::run(g); }

bool gemm_q5_0_packed_batch(const GemmArgs& g) {
  if (!q5_0_block_exact(g)) return false;
  q5_0_on_whole_groups(g, q5_0_lanes, gemm_q5_0);
  return true;
}

void gemm_q5_0(const GemmArgs& g) {
  if (q5_0_block_exact(g) && g.n_act <= kSmallBatch) LegacyDecode<Q5_0Weights>::run_exact(g, q5_0_lanes);
  else if (q5_0_block_exact(g)) SliceDriver<Q5_0Lanes>::run(g);
  else if (g.n_act <= kSmallBatch) LegacyDecode<Q5_0Weights>::run(g);
  else gemm_entry<LegacyKernel<Q5_0Weights>, 2, 2, 4>(g);
}
namespace {

// Plain AVX2's lanes for Q8_0LlamaLanes (q8_0_llama_lanes.h): vpmaddubsw(|w|, sign(x, w)) then vpmaddwd by ones,
// llama.cpp's own products and pairs, so the same int32 lanes; the repack keeps |w| beside the weights. Per (4
// pairs, 2 groups): vpsignb, vpmaddubsw, vpmaddwd and the FMA on ports 0 and 1 of Intel's cores, the bias's vpaddd and
// its vsubps free to go to port 5; the one-pair-a-vector tiles spent a vcvtdq2ps and a share of vpabsb there besides.
struct Avx2LaneDot {
  static constexpr int kActBlockBytes = kQ8_0Bytes;
  static __m256i companion(__m256i v) { return _mm256_abs_epi8(v); }
  static const uint8_t* act_quants(const GemmArgs&, const uint8_t* row) { return row + 2; }
  static __m256i lanes(__m256i w, __m256i abs_w, __m256i x8) {
    const __m256i pairs = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x8, w));
    return _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), _mm256_set1_epi32(kFloatBias));
  }
  static void check(const GemmArgs& g) {
    if (g.act_row_bytes < q8_0_sums_row_bytes(g.k))
      fail("Q8_0 prompt gemm: activation rows of {} bytes, not convert_q8_0_sums's {} (k = {})", g.act_row_bytes,
           q8_0_sums_row_bytes(g.k), g.k);
  }
};
static_assert(Q8_0LlamaLanes<Avx2LaneDot>::kBlockBytes <= Q8_0Lanes::kBlockBytes, "q8_0_scratch_floats holds a slice");

}  // namespace

// Prompts in llama.cpp's order: the weight rows in the lanes, or without a scratch (no caller of the graph's) the
// one-pair-a-vector tiles, the same bits.
static void q8_0_llama_batch(const GemmArgs& g) {
  if (g.scratch != nullptr) Q8_0LlamaLanes<Avx2LaneDot>::run(g);
  else Q8_0LlamaTiles<Avx2Dot>::run(g);
}
void gemm_q8_0(const GemmArgs& g) {
  if (g.n_act == 1) LegacyDecode<Q8_0Weights>::run(g);
  else if (g.n_act <= 16) small_batch<Q8_0Weights>(g);
  else if (lanes_batch(g, DType::Q8_0)) SliceDriver<Q8_0Lanes>::run(g);
  else q8_0_llama_batch(g);
}

bool gemm_q8_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= 16 || lanes_batch(g, DType::Q8_0)) return false;
  q8_0_llama_batch(g);
  return true;
}

}  // namespace opal::cpu::avx2
#endif  // x86
