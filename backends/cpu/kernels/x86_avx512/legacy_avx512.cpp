// Q4_0, Q5_0 and Q8_0 weights x Q8_0 activations with AVX-512 VNNI (256-bit vpdpbusd).
//
// vpdpbusd multiplies unsigned by signed bytes, so each weight block is made
// unsigned by an offset: Q4_0's nibbles q in [0, 15] stand for q - 8 (Q5_0's
// five-bit q in [0, 31] for q - 16), and a
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
// Tiles: see LegacyDecode (one activation row, and batches of up to 16 rows:
// each step of weight rows meets every activation row while it is in L1),
// LegacyPrompt / LegacyPromptRows (larger batches; Q5_0 in llama.cpp's order),
// Q8_0LlamaLanes (Q8_0 batches of more than 16 rows in llama.cpp's order, the
// default) and RowsInLanes (Q4_0 batches of more than 16 rows, and Q5_0 / Q8_0
// batches of more than 16 in the lanes order when batch_order() says so;
// weights repacked per call).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/error.h"

namespace opal::cpu::avx512 {
namespace {

constexpr int64_t kRowsInLanesMinActs = 4;  // RowsInLanes: batches of at least this many rows
// Batches up to these sizes run the decode kernels row by row (each weight
// step streamed once and met by every activation row from L1).
constexpr int64_t kSmallBatch = 16;
// Q8_0 in llama.cpp's order: Q8_0LlamaLanes from 9 rows (stop 35: 1.1-1.5x the decode kernels on the row groups at
// 12 and 16 rows, level at 8; bench_matmul_kernels mid*). Q4_0: RowsInLanes from 12 rows (stop 36: level with or
// ahead of the decode kernels on the row groups at 12 rows, 1.15-1.3x at 16, behind at 8). The table's
// packed_max_act for each is the same.
constexpr int64_t kQ8_0SmallBatch = 8, kQ4_0SmallBatch = 11;

// Rows [next, next + n) up to the slice's end (contiguous in the GGUF layout and in the row groups), requested into
// L2 while the rows-in-lanes kernels' tiles run on the slice before: Q8_0 batches of 48-96 rows from DRAM read
// 1.1-1.2x faster (bench_matmul_kernels mid-batch*; at 128 rows and more, level).
void prefetch_slice(const GemmArgs& g, int64_t next, int64_t n) {
  const int64_t rows = std::min<int64_t>(n, g.row_end - next);
  if (rows <= 0) return;
  const uint8_t* p = g.w + uint64_t(next) * g.w_row_bytes;
  for (int64_t o = 0; o < rows * int64_t(g.w_row_bytes); o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
}

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

// Q5_0: Q4_0's nibbles plus a fifth bit per element (qh bit j -> element j),
// q in [0, 31] standing for q - 16.
struct Q5_0Weights {
  static constexpr int kBytes = 22;
  static constexpr int kOffset = 16;
  static uint32_t high_bits(const uint8_t* blk) {
    uint32_t h;
    std::memcpy(&h, blk + 2, 4);
    return h;
  }
  static __m256i quants(const uint8_t* blk) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6));
    const __m256i both = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
    return _mm256_mask_or_epi32(both, 0xFF, both, _mm256_maskz_set1_epi8(__mmask32(high_bits(blk)), 0x10));
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

// Two rows' quants of block b as 64 unsigned bytes (row0 | row1).
__m512i pair_quants(Q8_0Weights, const uint8_t* b0, const uint8_t* b1) {
  const __m512i q =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  return _mm512_xor_si512(q, _mm512_set1_epi8(char(0x80)));
}

// [r0 | r1] packed nibbles (16 bytes each at qs) -> [lo r0 | hi r0 | lo r1 | hi r1],
// i.e. each row's elements 0-15 then 16-31 as in Q4_0Weights::quants.
__m512i pair_nibbles(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i v =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
  const __m512i z =
      _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);  // [lo0 lo1 hi0 hi1] after masking
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

__m512i pair_quants(Q4_0Weights, const uint8_t* b0, const uint8_t* b1) { return pair_nibbles(b0 + 2, b1 + 2); }

__m512i pair_quants(Q5_0Weights, const uint8_t* b0, const uint8_t* b1) {
  const __mmask64 high = __mmask64(Q5_0Weights::high_bits(b0)) | (__mmask64(Q5_0Weights::high_bits(b1)) << 32);
  const __m512i q = pair_nibbles(b0 + 6, b1 + 6);
  return _mm512_mask_or_epi32(q, 0xFFFF, q, _mm512_maskz_set1_epi8(high, 0x10));
}

// Decode (one activation row): 8 weight rows at a time, two rows per 512-bit
// vector (row 2j in lanes 0-7, row 2j+1 in lanes 8-15), so each row keeps
// the per-block 8-lane accumulation above (same order, same results) at
// about half the instructions: one vpdpbusd, convert and FMA per two
// row-blocks, the 8 rows' block scales converted together (vcvtph2ps) and
// spread to the lane halves by a permute.
// The hardware prefetchers lose track of eight interleaved row streams, so
// the loop prefetches the rows two steps on at the same offset (measured: 2x
// the DRAM throughput of no prefetch; bench_matmul_kernels decode/*).
short f16_bits(const uint8_t* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}

template <class W, bool kBlockwise = false>
struct LegacyDecode {
  // Two rows' quants of block b as 64 unsigned bytes (row0 | row1).

  // 8 weight rows against RA activation rows from act: each block's weights
  // are loaded once and meet the RA rows, every (row, activation) pair with
  // its own accumulator; prefetch: request the rows two steps on (the first
  // activation group of a step only).
  template <int RA>
  static void rows8(const GemmArgs& g, int64_t act, int64_t row, bool prefetch) {
    const int64_t nb = g.k / 32;
    const uint8_t* w[8];
    for (int i = 0; i < 8; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[4][RA];
    __m512i spread[4];
    for (int j = 0; j < 4; ++j) {
      for (int a = 0; a < RA; ++a) acc[j][a] = _mm512_setzero_ps();
      spread[j] = _mm512_set_epi32(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                   2 * j + 1, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j);
    }
    const __m512i offset = _mm512_set1_epi8(char(W::kOffset));
    const uint8_t* next = w[0] + 16 * g.w_row_bytes;  // two steps ahead (measured better than one for K = 576)
    const int lines_per_step = int((8 * g.w_row_bytes + 64 * nb - 1) / (64 * nb));
    for (int64_t b = 0; b < nb; ++b) {
      const uint64_t off = uint64_t(b) * W::kBytes;
      const __m128i h =
          kBlockwise
              ? _mm_setr_epi16(f16_bits(w[0] + off), f16_bits(w[2] + off), f16_bits(w[4] + off), f16_bits(w[6] + off),
                               f16_bits(w[1] + off), f16_bits(w[3] + off), f16_bits(w[5] + off), f16_bits(w[7] + off))
              : _mm_setr_epi16(f16_bits(w[0] + off), f16_bits(w[1] + off), f16_bits(w[2] + off), f16_bits(w[3] + off),
                               f16_bits(w[4] + off), f16_bits(w[5] + off), f16_bits(w[6] + off), f16_bits(w[7] + off));
      const __m256 dw = _mm256_cvtph_ps(h);
      // The 8 rows 16 on are one contiguous span: a share of its lines per
      // step (a prefetch past the end of the weights does not fault).
      for (int l = 0; prefetch && l < lines_per_step; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(next + (b * lines_per_step + l) * 64), _MM_HINT_T0);
      __m512i q[4];
      for (int j = 0; j < 4; ++j) q[j] = pair_quants(W{}, w[2 * j] + off, w[2 * j + 1] + off);
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
        const __m512i neg =
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xq));
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(load_f16(xb)));
        if constexpr (kBlockwise) {
          __m512i s[4];
          for (int j = 0; j < 4; ++j) s[j] = _mm512_dpbusd_epi32(neg, q[j], xq);
          acc[0][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(block_sums8(s)), _mm512_castps256_ps512(d), acc[0][a]);
        } else {
          const __m512 d512 = _mm512_castps256_ps512(d);
          for (int j = 0; j < 4; ++j)
            acc[j][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(neg, q[j], xq)),
                                        _mm512_permutexvar_ps(spread[j], d512), acc[j][a]);
        }
      }
    }
    for (int a = 0; a < RA; ++a) {
      float* out = g.out + (act + a) * g.out_stride;
      if constexpr (kBlockwise) {  // lanes hold rows 0 2 4 6 1 3 5 7
        alignas(32) float o[8];
        _mm256_store_ps(o, _mm512_castps512_ps256(acc[0][a]));
        for (int j = 0; j < 4; ++j) {
          out[row + 2 * j] = o[j];
          out[row + 2 * j + 1] = o[4 + j];
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          out[row + 2 * j] = hsum8(_mm512_castps512_ps256(acc[j][a]));
          out[row + 2 * j + 1] = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j][a]), 1)));
        }
      }
    }
  }

  // The 8 rows' exact block sums from the 4 row-pair vectors of 8-lane
  // partial sums (s[j]: row 2j in lanes 0-7, row 2j+1 in lanes 8-15), in the
  // lower 8 lanes in the row order 0 2 4 6 1 3 5 7 (the scales are loaded in
  // that order): 128-bit quarters summed across the four vectors, then halves.
  static __m512i block_sums8(const __m512i* s) {
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(3, 1, 3, 1)));
  }

  // One row, blockwise: each block's exact sum, then one FMA.
  static void row1_blockwise(const GemmArgs& g, const uint8_t* x, float* out, int64_t row) {
    const int64_t nb = g.k / 32;
    const uint8_t* w = g.w + uint64_t(row) * g.w_row_bytes;
    const __m256i offset = _mm256_set1_epi8(char(W::kOffset));
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* xb = x + b * kQ8_0Bytes;
      const uint8_t* wb = w + b * W::kBytes;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
      const __m256i neg =
          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, xq));
      const __m256i s = _mm256_dpbusd_epi32(neg, W::quants(wb), xq);
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(s));
      acc = std::fma(float(sum), load_f16(wb) * load_f16(xb), acc);
    }
    out[row] = acc;
  }

  // Decode, and small batches: each step of 8 weight rows meets the
  // activation rows kGroup at a time while its rows stay in L1 (fetched from
  // memory once, by the first group's prefetches), so a batch of a few rows
  // streams the weights once, as decode does. Each (row, activation) pair
  // keeps its own order: the results are those of any other path.
  static constexpr int kGroup = 4;
  static void run(const GemmArgs& g) {
    int64_t r = g.row_begin;
    // The first rows have no earlier step to prefetch them: request them all
    // at once rather than discovering them miss by miss.
    const uint8_t* first = g.w + uint64_t(r) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(g.row_end - r), 16) * g.w_row_bytes;
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    for (; r + 8 <= g.row_end; r += 8) {
      int64_t a = 0;
      for (; a + kGroup <= g.n_act; a += kGroup) rows8<kGroup>(g, a, r, a == 0);
      switch (g.n_act - a) {
        case 3: rows8<3>(g, a, r, a == 0); break;
        case 2: rows8<2>(g, a, r, a == 0); break;
        case 1: rows8<1>(g, a, r, a == 0); break;
        default: break;
      }
    }
    for (; r < g.row_end; ++r)
      for (int64_t a = 0; a < g.n_act; ++a) {
        if constexpr (kBlockwise) row1_blockwise(g, g.act + uint64_t(a) * g.act_row_bytes, g.out + a * g.out_stride, r);
        else LegacyKernel<W>::template tile<1, 1>(g, r, a);
      }
  }
};

// Q4_0 decode in the blockwise order: 16 rows per step, four rows per
// 512-bit vector (row 4j + L's 16 nibble bytes in 128-bit lane L of vector
// j). The low nibbles (elements 0-15) meet the activation's first 16 bytes
// broadcast to every 128-bit lane, the high nibbles (16-31) its last 16, so a
// row's 4 lanes hold its block's partial sums; two unpack-add rounds then give
// the 16 rows' exact block sums in one vector, lane 4L + m holding row
// 4m + L (the scales are loaded in that order). Half the instructions per row
// of the row-pair form (no 256-bit halves to insert, 4 reduction steps for 16
// rows); the same contiguous-span prefetch two steps on.
struct Q4_0Decode {
  // 16 weight rows against RA activation rows from act: the rows' nibbles
  // are loaded and split once per block and meet the RA rows.
  template <int RA>
  static void rows16(const GemmArgs& g, int64_t act, int64_t row, bool prefetch) {
    const int64_t nb = g.k / 32;
    // Four base pointers (rows 0, 4, 8, 12) and the row stride in multiples
    // of 1-3 keep every address in a register pair (16 row pointers would
    // spill).
    const uint64_t rb = g.w_row_bytes;
    const uint64_t rbs[4] = {0, rb, 2 * rb, 3 * rb};
    const uint8_t* base[4];
    for (int j = 0; j < 4; ++j) base[j] = g.w + uint64_t(row + 4 * j) * rb;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    const __m512i off8 = _mm512_set1_epi8(8), low4 = _mm512_set1_epi8(0x0F);
    const uint8_t* next = base[0] + 32 * rb;
    const int lines_per_step = int((16 * g.w_row_bytes + 64 * nb - 1) / (64 * nb));
    // Two steps of 16 long rows do not fit L1 together: those go to L2.
    const bool to_l2 = 32 * g.w_row_bytes > 32 * 1024;
    __m512 acc[RA];
    for (int a = 0; a < RA; ++a) acc[a] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint64_t off = uint64_t(b) * kQ4_0Bytes;
      for (int l = 0; prefetch && l < lines_per_step; ++l) {
        const char* p = reinterpret_cast<const char*>(next + (b * lines_per_step + l) * 64);
        if (to_l2) _mm_prefetch(p, _MM_HINT_T1);
        else _mm_prefetch(p, _MM_HINT_T0);
      }
      __m512i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const uint8_t* q = base[j] + off + 2;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + rbs[1])), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + rbs[2])), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + rbs[3])), 3);
        lo[j] = _mm512_and_si512(v, low4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
      const uint8_t* d0 = base[0] + off;
      const uint8_t* d1 = base[1] + off;
      const uint8_t* d2 = base[2] + off;
      const uint8_t* d3 = base[3] + off;
      const __m256i h =
          _mm256_setr_epi16(f16_bits(d0), f16_bits(d1), f16_bits(d2), f16_bits(d3), f16_bits(d0 + rbs[1]),
                            f16_bits(d1 + rbs[1]), f16_bits(d2 + rbs[1]), f16_bits(d3 + rbs[1]), f16_bits(d0 + rbs[2]),
                            f16_bits(d1 + rbs[2]), f16_bits(d2 + rbs[2]), f16_bits(d3 + rbs[2]), f16_bits(d0 + rbs[3]),
                            f16_bits(d1 + rbs[3]), f16_bits(d2 + rbs[3]), f16_bits(d3 + rbs[3]));
      const __m512 dw = _mm512_cvtph_ps(h);
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 2)));
        const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 18)));
        const __m512i neg =
            _mm512_sub_epi32(_mm512_setzero_si512(),
                             _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), off8, xlo), off8, xhi));
        __m512i s[4];
        for (int j = 0; j < 4; ++j) s[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(neg, lo[j], xlo), hi[j], xhi);
        const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
        const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
        const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(load_f16(xb)));
        acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), d, acc[a]);
      }
    }
    for (int a = 0; a < RA; ++a) {
      alignas(64) float o[16];
      _mm512_store_ps(o, acc[a]);
      float* out = g.out + (act + a) * g.out_stride;
      for (int lane = 0; lane < 16; ++lane) out[row + 4 * (lane % 4) + lane / 4] = o[lane];
    }
  }

  static void run(const GemmArgs& g) {
    int64_t r = g.row_begin;
    const uint8_t* first = g.w + uint64_t(r) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(g.row_end - r), 32) * g.w_row_bytes;
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    // Small batches: each step of 16 rows meets the activation rows 4 at a
    // time while it is in L1 (as LegacyDecode::run).
    for (; r + 16 <= g.row_end; r += 16) {
      int64_t a = 0;
      for (; a + 4 <= g.n_act; a += 4) rows16<4>(g, a, r, a == 0);
      switch (g.n_act - a) {
        case 3: rows16<3>(g, a, r, a == 0); break;
        case 2: rows16<2>(g, a, r, a == 0); break;
        case 1: rows16<1>(g, a, r, a == 0); break;
        default: break;
      }
    }
    GemmArgs rest = g;
    rest.row_begin = r;
    LegacyDecode<Q4_0Weights, true>::run(rest);
  }
};

// Prompts: two activation rows per 512-bit vector (row a in lanes 0-7, a+1
// in lanes 8-15) against one weight block broadcast to both halves, so one
// vpdpbusd, convert, multiply and FMA serve two (weight row, activation row)
// pairs; each pair keeps the per-block 8-lane order above (same results).
template <class W>
struct LegacyPrompt {
  template <int RW, int RP>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint8_t* w[RW];
    const uint8_t* x[2 * RP];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < 2 * RP; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[RW][RP];
    for (int i = 0; i < RW; ++i)
      for (int p = 0; p < RP; ++p) acc[i][p] = _mm512_setzero_ps();
    const __m512i offset = _mm512_set1_epi8(char(W::kOffset));
    for (int64_t b = 0; b < nb; ++b) {
      __m512i xq[RP], neg[RP];
      __m512 xd[RP];
      for (int p = 0; p < RP; ++p) {
        const uint8_t* x0 = x[2 * p] + b * kQ8_0Bytes;
        const uint8_t* x1 = x[2 * p + 1] + b * kQ8_0Bytes;
        xq[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + 2))),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1 + 2)), 1);
        neg[p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xq[p]));
        xd[p] = _mm512_insertf32x8(_mm512_set1_ps(load_f16(x0)), _mm256_set1_ps(load_f16(x1)), 1);
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * W::kBytes;
        const __m256i q256 = W::quants(wb);
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q256), q256, 1);
        const __m512 wd = _mm512_set1_ps(load_f16(wb));
        for (int p = 0; p < RP; ++p)
          acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(neg[p], q, xq[p])),
                                      _mm512_mul_ps(wd, xd[p]), acc[i][p]);
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int p = 0; p < RP; ++p) {
        g.out[(act + 2 * p) * g.out_stride + row + i] = hsum8(_mm512_castps512_ps256(acc[i][p]));
        g.out[(act + 2 * p + 1) * g.out_stride + row + i] =
            hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][p]), 1)));
      }
  }

  // A slice of weight rows against activation rows [a0, a1): pairs of
  // activation rows, an odd last one through LegacyKernel.
  template <int RW>
  static void rows(const GemmArgs& g, int64_t r, int64_t a0, int64_t a1) {
    int64_t a = a0;
    for (; a + 2 * kPairs <= a1; a += 2 * kPairs) tile<RW, kPairs>(g, r, a);
    for (; a + 2 <= a1; a += 2) tile<RW, 1>(g, r, a);
    for (; a < a1; ++a) LegacyKernel<W>::template tile<RW, 1>(g, r, a);
  }

  static void run(const GemmArgs& g) {
    for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
      const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
      int64_t r = g.row_begin;
      for (; r + kRows <= g.row_end; r += kRows) rows<kRows>(g, r, a0, a1);
      for (; r < g.row_end; ++r) rows<1>(g, r, a0, a1);
    }
  }

  static constexpr int kRows = 4, kPairs = 4;  // 16 accumulators (measured best of 2-8 x 2-5)
};

// Prompts (stop 14): LegacyDecode's layout with the prompt's tiling. Two
// weight rows per 512-bit vector (row 2j in lanes 0-7, 2j+1 in lanes 8-15)
// meet one activation block broadcast to both halves, so one vpdpbusd,
// convert, multiply and FMA serve two (row, activation) pairs as in
// LegacyPrompt, with less work around them. Each group of 8 weight rows is
// repacked per chunk of activation rows into the thread's scratch, per
// block: the 4 row pairs' quants as unsigned bytes (the offset form above,
// 64 bytes each) and their f16 scales as f32 spread to the two halves (64
// bytes each), so the tiles that follow (every activation row of the chunk)
// load them ready; the activation's scale is read as f32 from the row's
// tail (convert_q8_0_sums) and its quants are one broadcast load. Tiles of 8
// weight rows x kActs activation rows (16 accumulators). Each pair keeps the
// per-block 8-lane order (d_w * d_x rounded, then the FMA): the same bits.
template <class W>
struct LegacyPromptRows {
  static constexpr int kActs = 5;
  static constexpr int kBlockBytes = 4 * 64 + 4 * 64;  // quants, then scales

  // Rows row..row+7 from the GGUF layout or in place from the row groups (legacy_block: Q8_0 only; a slice
  // starts on a group there): pair_quants and f16_bits read a block's quants at +2, so they get at.quants - 2.
  static void repack(const GemmArgs& g, int64_t row, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* w[8];
      uint16_t h[8];
      for (int i = 0; i < 8; ++i) {
        const BlockAt at = legacy_block(g, row + i, b, W::kBytes);
        w[i] = at.quants - 2;
        std::memcpy(&h[i], at.scale, 2);
      }
      uint8_t* pb = packed + b * kBlockBytes;
      const __m512 dw = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
      for (int j = 0; j < 4; ++j) {
        const __m512i spread = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * j), _mm512_set1_epi32(2 * j + 1));
        _mm512_storeu_si512(pb + 64 * j, pair_quants(W{}, w[2 * j], w[2 * j + 1]));
        _mm512_storeu_ps(pb + 256 + 64 * j, _mm512_permutexvar_ps(spread, dw));
      }
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, const uint8_t* starts, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint64_t scales_at = uint64_t(nb) * kQ8_0Bytes;
    const uint8_t* x[RA];
    const uint8_t* st[RA];
    for (int a = 0; a < RA; ++a) {
      x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
      st[a] = starts + uint64_t(a) * uint64_t(nb) * 32;
    }
    __m512 acc[4][RA];
    for (int j = 0; j < 4; ++j)
      for (int a = 0; a < RA; ++a) acc[j][a] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      __m512i q[4];
      for (int j = 0; j < 4; ++j) q[j] = _mm512_loadu_si512(pb + 64 * j);
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
        const __m512i neg =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(st[a] + b * 32)));
        float xd;
        std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
        const __m512 xs = _mm512_set1_ps(xd);
        for (int j = 0; j < 4; ++j)
          acc[j][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(neg, q[j], xq)),
                                      _mm512_mul_ps(_mm512_loadu_ps(pb + 256 + 64 * j), xs), acc[j][a]);
      }
    }
    for (int a = 0; a < RA; ++a) {
      float* out = g.out + (act + a) * g.out_stride;
      for (int j = 0; j < 4; ++j) {
        out[row + 2 * j] = hsum8(_mm512_castps512_ps256(acc[j][a]));
        out[row + 2 * j + 1] = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j][a]), 1)));
      }
    }
  }

  static void run(const GemmArgs& g) {
    const int64_t nb = g.k / 32;
    uint8_t* packed = reinterpret_cast<uint8_t*>(g.scratch);
    uint8_t* starts = packed + nb * kBlockBytes;
    const __m256i offset = _mm256_set1_epi8(char(W::kOffset));
    for (int64_t a0 = 0; a0 < g.n_act; a0 += kActChunk) {
      const int64_t a1 = a0 + kActChunk < g.n_act ? a0 + kActChunk : g.n_act;
      // The chunk's starting sums -offset * (4 activations' sum), 8 per block.
      for (int64_t a = a0; a < a1; ++a) {
        const uint8_t* xa = g.act + uint64_t(a) * g.act_row_bytes;
        for (int64_t b = 0; b < nb; ++b) {
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa + b * kQ8_0Bytes + 2));
          _mm256_storeu_si256(
              reinterpret_cast<__m256i*>(starts + ((a - a0) * nb + b) * 32),
              _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, xq)));
        }
      }
      int64_t r = g.row_begin;
      for (; r + 8 <= g.row_end; r += 8) {
        repack(g, r, packed);
        int64_t a = a0;
        auto st = [&](int64_t act) { return starts + (act - a0) * nb * 32; };
        for (; a + kActs <= a1; a += kActs) tile<kActs>(g, packed, st(a), r, a);
        switch (a1 - a) {
          case 4: tile<4>(g, packed, st(a), r, a); break;
          case 3: tile<3>(g, packed, st(a), r, a); break;
          case 2: tile<2>(g, packed, st(a), r, a); break;
          case 1: tile<1>(g, packed, st(a), r, a); break;
          default: break;
        }
      }
      for (; r < g.row_end; ++r) LegacyPrompt<W>::template rows<1>(g, r, a0, a1);
    }
  }
};

// Q8_0 prompts in llama.cpp's order with the weight rows in the lanes (stop 35; batches of more than
// kQ8_0SmallBatch rows, in the default order). llama.cpp's 8-lane order gives int32 lane l of a (row, activation) block
// the sum of elements 4l..4l+3, then acc_l = fma(d_w * d_x, float(lane), acc_l) block by block, and hsum8 at the end.
// Here one 512-bit vector holds the 8 bytes of groups 2m and 2m+1 of 8 weight rows (lane 2i + e: row i, group
// 2m + e); the activation's same 8 bytes, broadcast, meet them in one vpdpbusd: lanes 2m and 2m+1 of 8 pairs.
// Each (activation row, m) keeps its own float accumulator (4 per activation row), and the products d_w * d_x
// of the 8 rows take one multiply a block (LegacyPromptRows pays one per 2 pairs). hsum8's tree becomes vertical
// adds of the 4 accumulators and one add of neighbouring lanes: the same bits.
// vpdpbusd wants one unsigned operand: the activation's bytes flipped to x + 128 (xor 0x80; convert_q8_0_flipped
// appends them to each activation row once, stop 38: on Zen 4 pp512 +1-25 % end to end against a xor per vpdpbusd)
// and each weight group's int32 starts at -128 * (its 4 signed weights' sum), precomputed by the repack, so each
// lane is exact.
// The repack (per call and 8-row slice, in place from the load-time row groups or from the GGUF rows) is a
// qword transpose of the 8 rows' blocks, two rounds of vpermt2q. Per block: the 8 rows' f32 scales, each twice
// (64 bytes), then per m the quants and the starts (64 bytes each). Tiles of 8 weight rows x kActs activation rows
// (20 float accumulators).
struct Q8_0LlamaLanes {
  static constexpr int kSlice = 8, kActs = 5;
  static constexpr int kBlockBytes = 64 + 4 * 128;  // scales, then per m quants and starts

  // One block of the 8 rows: their scales (f32, lanes 0-7) and their quants as four pair vectors (rows 2j, 2j+1).
  static void pack_block(__m512 scales, const __m512i z[4], uint8_t* pb) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    // Round 1 (rows 4h..4h+3 from two pair vectors): qwords 0, 1 of the 4 rows, then qwords 2, 3. Round 2: m.
    const __m512i first = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0),
                  second = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2);
    const __m512i lo = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0), hi = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
    const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    _mm512_storeu_ps(pb, _mm512_permutexvar_ps(twice, scales));
    const __m512i p0 = _mm512_permutex2var_epi64(z[0], first, z[1]), p1 = _mm512_permutex2var_epi64(z[0], second, z[1]);
    const __m512i p2 = _mm512_permutex2var_epi64(z[2], first, z[3]), p3 = _mm512_permutex2var_epi64(z[2], second, z[3]);
    const __m512i w[4] = {_mm512_permutex2var_epi64(p0, lo, p2), _mm512_permutex2var_epi64(p0, hi, p2),
                          _mm512_permutex2var_epi64(p1, lo, p3), _mm512_permutex2var_epi64(p1, hi, p3)};
    for (int m = 0; m < 4; ++m) {
      _mm512_storeu_si512(pb + 64 + 128 * m, w[m]);
      // -128 * (w0 + w1 + w2 + w3): vpdpbusd of the unsigned bytes 0x80 by the signed weights, negated.
      _mm512_storeu_si512(
          pb + 128 + 128 * m,
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, w[m])));
    }
  }

  // rows (1 to 8) weight rows from row, zero rows after them. A whole row group (kernels/repack.h) is read as it
  // lies: per block the 8 f16 scales, then the 8 rows' quants, two rows to a vector.
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    if (g.layout == kLayoutRowGroups8 && rows == 8 && row % 8 == 0 && row + 8 <= g.n_rows / 8 * 8) {
      const uint8_t* grp = g.w + uint64_t(row) * g.w_row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = grp + uint64_t(b) * 8 * kQ8_0Bytes;
        __m512i z[4];
        for (int j = 0; j < 4; ++j) z[j] = _mm512_loadu_si512(blk + 16 + 64 * j);
        const __m512 scales =
            _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
        pack_block(scales, z, packed + b * kBlockBytes);
      }
      prefetch_slice(g, row + kSlice, kSlice);
      return;
    }
    for (int64_t b = 0; b < nb; ++b) {
      alignas(32) float scales[8] = {};
      __m256i q[8];
      for (int r = 0; r < 8; ++r) {
        if (r >= rows) {
          q[r] = _mm256_setzero_si256();
          continue;
        }
        const BlockAt at = legacy_block(g, row + r, b, kQ8_0Bytes);
        scales[r] = load_f16(at.scale);
        q[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at.quants));
      }
      __m512i z[4];
      for (int j = 0; j < 4; ++j) z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(q[2 * j]), q[2 * j + 1], 1);
      pack_block(_mm512_castps256_ps512(_mm256_load_ps(scales)), z, packed + b * kBlockBytes);
    }
    prefetch_slice(g, row + kSlice, kSlice);
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out8[]) {
    const int64_t nb = g.k / 32;
    const uint64_t scales_at = uint64_t(nb) * kQ8_0Bytes, flipped_at = q8_0_sums_row_bytes(g.k);
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[RA][4];
    for (int a = 0; a < RA; ++a)
      for (int m = 0; m < 4; ++m) acc[a][m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const __m512 wd = _mm512_loadu_ps(pb);
      __m512 d[RA];
      for (int a = 0; a < RA; ++a) {
        float xd;
        std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
        d[a] = _mm512_mul_ps(wd, _mm512_set1_ps(xd));
      }
      for (int m = 0; m < 4; ++m) {
        __m512i q = _mm512_loadu_si512(pb + 64 + 128 * m);
        __m512i start = _mm512_loadu_si512(pb + 128 + 128 * m);
        asm("" : "+v"(q), "+v"(start));  // one load each, not one per activation row (GCC 12 folds them: load-bound)
        for (int a = 0; a < RA; ++a) {
          int64_t eight;
          std::memcpy(&eight, x[a] + flipped_at + 32 * b + 8 * m, 8);
          const __m512i xu = _mm512_set1_epi64(eight);
          acc[a][m] = _mm512_fmadd_ps(d[a], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, xu, q)), acc[a][m]);
        }
      }
    }
    // hsum8's tree: lanes (l0 + l4) + (l2 + l6) and (l1 + l5) + (l3 + l7) side by side, then their sum.
    const __m512i evens = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int a = 0; a < RA; ++a) {
      const __m512 u = _mm512_add_ps(_mm512_add_ps(acc[a][0], acc[a][2]), _mm512_add_ps(acc[a][1], acc[a][3]));
      const __m512 s = _mm512_add_ps(u, _mm512_permute_ps(u, 0xB1));
      _mm256_storeu_ps(out8[a], _mm512_castps512_ps256(_mm512_permutexvar_ps(evens, s)));
    }
  }
};

// Q4_0 batches: weight rows in the int32 lanes. Each slice of 32 weight rows
// is repacked once per call into the thread's scratch: per block, the 32
// rows' scales as f32, then the quants as unsigned bytes (the offset form
// above) grouped by 4 elements, [group 0..7][row 0..31][4 bytes], so one
// 512-bit vector holds 16 rows' 4 elements of a group and one vpdpbusd
// multiplies them by one activation row's 4 elements (broadcast). A block's
// 8 groups sum exactly in int32, starting from -offset * sum(x) (the
// activation's block sum, from the activation row's tail: convert_q8_0_sums);
// then one convert and FMA by d_w * d_x serve 16 (row, activation) pairs, and
// the float accumulators are already the output layout (16 consecutive
// output columns). The order, acc = fma(float(isum_b), d_w * d_x, acc) block
// by block, is llama.cpp's for its repacked Q4_0 (gemm_q4_0 below).
// The repack costs one pass over the slice per call; from 4 activation rows
// on it is cheaper than the 8-lane kernels' extra float work.
// Tiles of 32 rows x 4 activation rows: 8 int32 and 8 float accumulators
// (measured: 4 activation rows 357 GOP/s, 5: 320, 6: 313 on
// bench_matmul_kernels prompt/avx512/q4_0; the 8-lane LegacyPrompt: 163).
template <class W>
struct RowsInLanes {
  static constexpr int kSlice = 32;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants
  static constexpr int kActs = 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= kRowsInLanesMinActs && g.scratch != nullptr; }

  // rows (1 to 32) weight rows from row into packed, zero rows after them up
  // to a multiple of 16.
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    if (std::is_same_v<W, Q5_0Weights> && g.layout == kLayoutQ5Groups8) {  // gemm_q5_0_packed_batch: whole groups
      avx2::q5_0_groups_to_lanes(g, row, rows, kSlice, kBlockBytes, packed);
      prefetch_slice(g, row + kSlice, kSlice);
      return;
    }
    const bool whole_q4_0_groups = std::is_same_v<W, Q4_0Weights> && g.layout == kLayoutRowGroups8 && rows % 16 == 0 &&
                                   row % 8 == 0 && row + rows <= g.n_rows / 8 * 8;
    if (whole_q4_0_groups) repack_q4_0_groups(g, row, rows, packed);
    else repack_rows(g, row, rows, packed);
    prefetch_slice(g, row + kSlice, kSlice);
  }

  // Whole Q4_0 row groups (stop 35; the row-by-row form below spent 38 % of a 64-row call): per group and block the
  // 8 rows' quants (rows 0, 4, 1, 5, 2, 6, 3, 7, 16 bytes each) in two loads; one vpermt2d each gives dwords 0, 1
  // and 2, 3 of rows 0..7, whose low nibbles are groups 0-3 and high nibbles groups 4-7.
  static void repack_q4_0_groups(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    // Lane l: row r = l % 8 (stored at position (r % 4) * 2 + r / 4), dword j = l / 8 (+2 for the second).
    const __m512i cols01 = _mm512_set_epi32(29, 21, 13, 5, 25, 17, 9, 1, 28, 20, 12, 4, 24, 16, 8, 0);
    const __m512i cols23 = _mm512_add_epi32(cols01, _mm512_set1_epi32(2));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int q = 0; q < rows / 8; ++q) {
      const uint8_t* grp = g.w + uint64_t(row + 8 * q) * g.w_row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = grp + uint64_t(b) * 8 * kQ4_0Bytes;
        uint8_t* pb = packed + b * kBlockBytes;
        _mm256_storeu_ps(reinterpret_cast<float*>(pb) + 8 * q,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
        const __m512i z0 = _mm512_loadu_si512(blk + 16), z1 = _mm512_loadu_si512(blk + 80);
        const __m512i c[2] = {_mm512_permutex2var_epi32(z0, cols01, z1), _mm512_permutex2var_epi32(z0, cols23, z1)};
        for (int h = 0; h < 2; ++h) {
          const __m512i lo = _mm512_and_si512(c[h], nibble), hi = _mm512_and_si512(_mm512_srli_epi16(c[h], 4), nibble);
          uint8_t* at = pb + kSlice * 4 + 8 * q * 4;
          const int g0 = 2 * h;  // groups g0, g0 + 1 (low nibbles) and g0 + 4, g0 + 5 (high)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + g0 * kSlice * 4), _mm512_castsi512_si256(lo));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (g0 + 1) * kSlice * 4), _mm512_extracti64x4_epi64(lo, 1));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (g0 + 4) * kSlice * 4), _mm512_castsi512_si256(hi));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (g0 + 5) * kSlice * 4), _mm512_extracti64x4_epi64(hi, 1));
        }
      }
    }
  }

  static void repack_rows(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    const int padded = (rows + 15) / 16 * 16;
    alignas(64) uint32_t tmp[kSlice][8] = {};
    const __m512i index = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                             _mm512_set1_epi32(8));
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* scales = reinterpret_cast<float*>(pb);
      for (int r = 0; r < rows; ++r) {  // in place on the row groups (Q4_0, Q8_0; quants() reads a block at +2)
        const BlockAt at = legacy_block(g, row + r, b, W::kBytes);
        scales[r] = load_f16(at.scale);
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[r]), W::quants(at.quants - 2));
      }
      for (int r = rows; r < padded; ++r) scales[r] = 0.0f;
      for (int grp = 0; grp < 8; ++grp)
        for (int h = 0; h < padded / 16; ++h)
          _mm512_storeu_si512(pb + kSlice * 4 + (grp * kSlice + 16 * h) * 4,
                              _mm512_i32gather_epi32(index, &tmp[16 * h][grp], 4));
    }
  }

  template <int RV, int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t row, int64_t act, uint16_t last) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    const uint64_t scales_at = uint64_t(nb) * kQ8_0Bytes, sums_at = scales_at + uint64_t(nb) * 4;
    __m512 facc[RV][RA];
    for (int v = 0; v < RV; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      __m512i iacc[RV][RA];
      for (int a = 0; a < RA; ++a) {
        int32_t sum;
        std::memcpy(&sum, x[a] + sums_at + 4 * b, 4);
        const __m512i start = _mm512_set1_epi32(-W::kOffset * sum);
        for (int v = 0; v < RV; ++v) iacc[v][a] = start;
      }
      for (int grp = 0; grp < 8; ++grp) {
        __m512i w[RV];
        for (int v = 0; v < RV; ++v) w[v] = _mm512_loadu_si512(pb + kSlice * 4 + (grp * kSlice + 16 * v) * 4);
        for (int a = 0; a < RA; ++a) {
          int32_t four;
          std::memcpy(&four, x[a] + b * kQ8_0Bytes + 2 + 4 * grp, 4);
          const __m512i xb = _mm512_set1_epi32(four);
          for (int v = 0; v < RV; ++v) iacc[v][a] = _mm512_dpbusd_epi32(iacc[v][a], w[v], xb);
        }
      }
      for (int v = 0; v < RV; ++v) {
        const __m512 wd = _mm512_loadu_ps(reinterpret_cast<const float*>(pb) + 16 * v);
        for (int a = 0; a < RA; ++a) {
          float xd;
          std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
          facc[v][a] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[v][a]), _mm512_mul_ps(wd, _mm512_set1_ps(xd)), facc[v][a]);
        }
      }
    }
    for (int a = 0; a < RA; ++a)
      for (int v = 0; v < RV; ++v)
        _mm512_mask_storeu_ps(g.out + (act + a) * g.out_stride + row + 16 * v, v == RV - 1 ? __mmask16(last) : 0xFFFF,
                              facc[v][a]);
  }
};

}  // namespace

// Q4_0: llama.cpp repacks Q4_0 on x86 and its gemm and gemv sum each block
// exactly, then acc = fma(float(isum), d_w * d_x, acc): that order at every
// batch size (decode and batches of up to kQ4_0SmallBatch rows in Q4_0Decode, larger ones RowsInLanes).
void gemm_q4_0(const GemmArgs& g) {
  using W = Q4_0Weights;
  if (g.n_act > kQ4_0SmallBatch && RowsInLanes<W>::applies(g)) RowsInLanesDriver<RowsInLanes<W>>::run(g);
  else Q4_0Decode::run(g);
}

namespace {
// Q8_0LlamaLanes reads the flipped quants convert_q8_0_flipped appends to each activation row.
void run_q8_0_llama_lanes(const GemmArgs& g) {
  if (g.act_row_bytes < q8_0_flipped_row_bytes(g.k))
    fail("Q8_0 prompt gemm: activation rows of {} bytes, not convert_q8_0_flipped's {} (k = {})", g.act_row_bytes,
         q8_0_flipped_row_bytes(g.k), g.k);
  SliceDriver<Q8_0LlamaLanes>::run(g);
}
}  // namespace

// Q5_0 and Q8_0: llama.cpp's x86 vec_dot / tinyBLAS 8-lane order (no
// repacking there; the Q8_0 goldens are bit-identical with it).
// Batches of up to kSmallBatch rows (Q8_0: kQ8_0SmallBatch, or kSmallBatch without a scratch) take the decode
// kernel, each weight step meeting every activation row (the weights streamed once, with prefetch); larger ones
// the prompt tiles (Q5_0 LegacyPromptRows, Q8_0 Q8_0LlamaLanes). The same order on every path.
// In the lanes order (batch_order()) Q5_0 and Q8_0 batches of more than 16
// rows take RowsInLanes, the weights offset to unsigned (Q5_0: q as stored,
// the sums started at -16 * sum(x); Q8_0: w + 128, -128 * sum(x)); Q5_0's
// smaller batches and decode then take LegacyDecode's blockwise form (stop 40,
// avx2::q5_0_block_exact: each block's exact sum, one FMA), so Q5_0 has one
// order at every batch size, as on avx2 and on the row groups.
void gemm_q5_0(const GemmArgs& g) {
  using W = Q5_0Weights;
  if (g.n_act <= kSmallBatch && avx2::q5_0_block_exact(g)) LegacyDecode<W, true>::run(g);
  else if (g.n_act <= kSmallBatch) LegacyDecode<W>::run(g);
  else if (!g.single_rows && RowsInLanes<W>::applies(g) && lanes_order(DType::Q5_0))
    RowsInLanesDriver<RowsInLanes<W>>::run(g);
  else if (g.scratch != nullptr) LegacyPromptRows<W>::run(g);
  else LegacyPrompt<W>::run(g);
}

void gemm_q8_0(const GemmArgs& g) {
  using W = Q8_0Weights;
  if (g.n_act <= kQ8_0SmallBatch || (g.n_act <= kSmallBatch && g.scratch == nullptr)) LegacyDecode<W>::run(g);
  else if (g.n_act > kSmallBatch && !g.single_rows && RowsInLanes<W>::applies(g) && lanes_order(DType::Q8_0))
    RowsInLanesDriver<RowsInLanes<W>>::run(g);
  else if (g.scratch != nullptr) run_q8_0_llama_lanes(g);
  else LegacyPrompt<W>::run(g);
}

// Prompt batches on the load-time row groups (stop 33): the same kernels, their repack reading the groups in place
// (legacy_block), where MUL_MAT used to unpack 32 rows at a time for them. Q4_0 from kQ4_0SmallBatch + 1 rows
// (RowsInLanes), Q8_0 from kQ8_0SmallBatch + 1 in llama.cpp's order (Q8_0LlamaLanes since stop 35, which
// batches of 9-16 rows take in every order, as on the plain layout); batches of more than 16 rows in the Q8_0 lanes
// order and batches without a scratch decline (false): MUL_MAT unpacks for them.
bool gemm_q4_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kQ4_0SmallBatch || !RowsInLanes<Q4_0Weights>::applies(g)) return false;
  if (g.row_begin % 8 != 0)
    fail("Q4_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
  RowsInLanesDriver<RowsInLanes<Q4_0Weights>>::run(g);
  return true;
}

bool gemm_q5_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || !avx2::q5_0_block_exact(g)) return false;
  q5_0_on_whole_groups(g, RowsInLanesDriver<RowsInLanes<Q5_0Weights>>::run, gemm_q5_0);
  return true;
}

bool gemm_q8_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kQ8_0SmallBatch || g.scratch == nullptr || (g.n_act > kSmallBatch && lanes_order(DType::Q8_0)))
    return false;
  if (g.row_begin % 8 != 0)
    fail("Q8_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
  run_q8_0_llama_lanes(g);
  return true;
}

uint64_t q8_0_sums_row_bytes(int64_t k) { return uint64_t(k / 32) * (kQ8_0Bytes + 8); }
int64_t legacy_scratch_floats(int64_t k) {
  return k / 32 *
         std::max<int64_t>({RowsInLanes<Q4_0Weights>::kBlockBytes, Q8_0LlamaLanes::kBlockBytes,
                            LegacyPromptRows<Q5_0Weights>::kBlockBytes + kActChunk * 32}) /
         4;
}

}  // namespace opal::cpu::avx512
#endif  // x86
