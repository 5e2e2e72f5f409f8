// Q4_K, Q5_K, Q6_K weights x Q8_K activations with AVX-512 BW + VNNI.
//
// Per 256-element super-block and (weight row, activation row) pair, the
// integer sum  sum_s sc_s * sum_{e in s} q_e * x_e  is built in 512-bit
// registers holding 64 elements (two 32-element sub-blocks of Q4_K/Q5_K, four
// 16-element sub-blocks of Q6_K):
//   vpmaddubsw(q_u8, x_s8)       -> 32 int16 pair sums (no saturation: q <= 63)
//   vpdpwssd(isum, pairs, sc16)  -> int32 += pair sum * the pair's sub-block scale
// The 32-element layout of Q4_K/Q5_K: qs bytes 32j..32j+31 hold sub-block 2j in
// their low nibbles and 2j+1 in the high nibbles; broadcasting them to both
// 256-bit halves and shifting the upper half right by 4 gives elements
// 64j..64j+63 in order, matching the activation's contiguous quants. Q5_K's
// fifth bit is OR-ed in by a byte mask from qh (bit 2j / 2j+1 of qh[l]).
// Q6_K: ql bytes 64g..64g+63 give elements 128g+0..63 (low nibbles) and
// 128g+64..127 (high nibbles); qh's 2-bit fields are moved to bits 4-5.
// Offsets use the activation's bsums (sums of 16 quants):
//   Q4_K/Q5_K: - dmin * d_x * sum_s m_s * (bsum_2s + bsum_2s+1)
//   Q6_K:      isum -= 32 * sum_s sc_s * bsum_s   (q - 32)
// The int32 results are exact; they are scaled by d * d_x in float.
// Tiles: 2 weight rows x 4 activation rows for prompts, 4 x 1 for decode
// (with a software prefetch of the next 4 rows).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/error.h"

namespace opal::cpu::avx512 {
namespace {

constexpr __mmask32 kUpper16 = 0xFFFF0000u;
constexpr __mmask64 kUpper32 = 0xFFFFFFFF00000000ull;

// Elements 64j..64j+63 of a Q4_K-style 4-bit layout.
__m512i nibbles64(const uint8_t* qs32) {
  const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs32)));
  return _mm512_and_si512(_mm512_mask_srli_epi16(v, kUpper16, v, 4), _mm512_set1_epi8(0x0F));
}

// Index vector for _mm512_permutexvar_epi16 over 8 int16 scales (repeated):
// lanes 0-15 take scale 2j, lanes 16-31 scale 2j+1.
__m512i scale_pair_index(int j) {
  alignas(64) int16_t idx[32];
  for (int l = 0; l < 32; ++l) idx[l] = int16_t(2 * j + l / 16);
  return _mm512_load_si512(idx);
}

// The 8 six-bit scales and mins of a Q4_K/Q5_K super-block as int16 lanes
// (the bit layout of unpack_q4k_scales, done on 32-bit words: u0 = bytes 0-3,
// u1 = 4-7, u2 = 8-11; scales 0-3 = u0 & 63, mins 0-3 = u1 & 63, scales 4-7 =
// low nibbles of u2 | top two bits of u0 << 4, mins 4-7 = high nibbles of u2 |
// top two bits of u1 << 4).
void q4k_scales_mins(const uint8_t* q, __m128i* sc, __m128i* mn) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, q, 4);
  std::memcpy(&u1, q + 4, 4);
  std::memcpy(&u2, q + 8, 4);
  const uint64_t s = uint64_t(u0 & 0x3f3f3f3fu) | uint64_t((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32;
  const uint64_t m = uint64_t(u1 & 0x3f3f3f3fu) | uint64_t(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)) << 32;
  *sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(s)));
  *mn = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m)));
}

// Decode streams RW weight rows side by side, which the hardware prefetchers
// follow poorly: fetch the same super-block of the rows kAheadSteps steps on
// (`ahead` bytes); a prefetch past the end of the weights does not fault.
// One step on was too close to hide DRAM latency for short rows (Q6_K
// decode-1024, best of 7: 1 step 20 GB/s, 3 steps 36, 6 steps 34).
constexpr int kAheadSteps = 3;
void prefetch_next_rows(const uint8_t* blk, uint64_t ahead, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + o), _MM_HINT_T0);
}

__m256i load_bsums(const uint8_t* xb) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + kQ8_KBsums)); }
__m512i load_xq(const uint8_t* xb, int j) { return _mm512_loadu_si512(xb + kQ8_KQs + 64 * j); }

// Q4_K and Q5_K share everything but the fifth bit.
template <bool kFive>
struct Q45KKernel {
  static constexpr int kBytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  static constexpr int kQs = kFive ? kQ5_KQs : kQ4_KQs;

  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 256;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    const __m512i pair_index[4] = {scale_pair_index(0), scale_pair_index(1), scale_pair_index(2), scale_pair_index(3)};
    for (int64_t b = 0; b < nb; ++b) {
      __m512i sc[RW][4];
      __m256i mn[RW];
      float d[RW], dmin[RW];
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * kBytes;
        if (RA == 1) prefetch_next_rows(wb, kAheadSteps * RW * g.w_row_bytes, kBytes);
        __m128i s8, m8;
        q4k_scales_mins(wb + kQ4_KScales, &s8, &m8);
        const __m512i s512 = _mm512_broadcast_i32x4(s8);
        for (int j = 0; j < 4; ++j) sc[i][j] = _mm512_permutexvar_epi16(pair_index[j], s512);
        mn[i] = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
        d[i] = load_f16(wb);
        dmin[i] = load_f16(wb + 2);
      }
      __m512i isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        __m512i xq[RA];
        for (int a = 0; a < RA; ++a) xq[a] = load_xq(x[a] + b * kQ8_KBytes, j);
        for (int i = 0; i < RW; ++i) {
          const uint8_t* wb = w[i] + b * kBytes;
          __m512i q = nibbles64(wb + kQs + 32 * j);
          if constexpr (kFive) {
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + kQ5_KQh)));
            const __m512i bit = _mm512_mask_blend_epi8(kUpper32, _mm512_set1_epi8(char(1 << (2 * j))),
                                                       _mm512_set1_epi8(char(1 << (2 * j + 1))));
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
          }
          for (int a = 0; a < RA; ++a)
            isum[i][a] = _mm512_dpwssd_epi32(isum[i][a], _mm512_maddubs_epi16(q, xq[a]), sc[i][j]);
        }
      }
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        const float xd = load_f32(xb);
        const __m256i bs = load_bsums(xb);
        for (int i = 0; i < RW; ++i) {
          const __m512 m = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mn[i])));
          acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][a]), _mm512_set1_ps(d[i] * xd), acc[i][a]);
          acc[i][a] = _mm512_fnmadd_ps(m, _mm512_set1_ps(dmin[i] * xd), acc[i][a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
};

// Index vectors for Q6_K's scales: zmm group h (0..3) covers sub-blocks 4h..4h+3,
// each 8 int16 lanes.
__m512i q6_scale_index(int h) {
  alignas(64) int16_t idx[32];
  for (int l = 0; l < 32; ++l) idx[l] = int16_t(4 * h + l / 8);
  return _mm512_load_si512(idx);
}

struct Q6KKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 256;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm512_setzero_ps();
    const __m512i idx[4] = {q6_scale_index(0), q6_scale_index(1), q6_scale_index(2), q6_scale_index(3)};
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lo2 = _mm512_set1_epi8(0x03);
    for (int64_t b = 0; b < nb; ++b) {
      __m256i sc16[RW];
      float d[RW];
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * kQ6_KBytes;
        if (RA == 1) prefetch_next_rows(wb, kAheadSteps * RW * g.w_row_bytes, kQ6_KBytes);
        sc16[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + kQ6_KScales)));
        d[i] = load_f16(wb + kQ6_KD);
      }
      __m512i isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = _mm512_setzero_si512();
      for (int half = 0; half < 2; ++half) {
        __m512i xA[RA], xB[RA];
        for (int a = 0; a < RA; ++a) {
          xA[a] = load_xq(x[a] + b * kQ8_KBytes, 2 * half);
          xB[a] = load_xq(x[a] + b * kQ8_KBytes, 2 * half + 1);
        }
        for (int i = 0; i < RW; ++i) {
          const uint8_t* wb = w[i] + b * kQ6_KBytes;
          const __m512i ql = _mm512_loadu_si512(wb + 64 * half);
          const __m512i qh =
              _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + kQ6_KQh + 32 * half)));
          const __m512i hA = _mm512_mask_srli_epi16(qh, kUpper16, qh, 2);  // bits 0-1 | 2-3
          const __m512i hB =
              _mm512_mask_srli_epi16(_mm512_srli_epi16(qh, 4), kUpper16, _mm512_srli_epi16(qh, 4), 2);  // 4-5 | 6-7
          const __m512i qA =
              _mm512_or_si512(_mm512_and_si512(ql, lo4), _mm512_slli_epi16(_mm512_and_si512(hA, lo2), 4));
          const __m512i qB = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
                                             _mm512_slli_epi16(_mm512_and_si512(hB, lo2), 4));
          const __m512i s512 = _mm512_broadcast_i64x4(sc16[i]);
          const __m512i scA = _mm512_permutexvar_epi16(idx[2 * half], s512);
          const __m512i scB = _mm512_permutexvar_epi16(idx[2 * half + 1], s512);
          for (int a = 0; a < RA; ++a) {
            isum[i][a] = _mm512_dpwssd_epi32(isum[i][a], _mm512_maddubs_epi16(qA, xA[a]), scA);
            isum[i][a] = _mm512_dpwssd_epi32(isum[i][a], _mm512_maddubs_epi16(qB, xB[a]), scB);
          }
        }
      }
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        const float xd = load_f32(xb);
        const __m256i bs = load_bsums(xb);
        for (int i = 0; i < RW; ++i) {
          const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[i]), 5);  // 32 * sum sc_s * bsum_s
          const __m512i s = _mm512_sub_epi32(isum[i][a], _mm512_zextsi256_si512(corr));
          acc[i][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d[i] * xd), acc[i][a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
};

// The rows-in-lanes K-quant kernels' shared steps (32-row slices, two 16-row
// vectors). itot[v][a] += scale * (sum over kGroups 4-quant groups starting at
// quant group `first` of the packed u8 quants x the activation quants at x_q),
// with the 32 rows' int32 scales at `scales`.
template <int RV, int RA, int kGroups>
[[gnu::always_inline]] inline void add_scaled_sub_block(__m512i (&itot)[RV][RA], const uint8_t* quants,
                                                        const uint8_t* scales, int first, const uint8_t* const* x_q) {
  __m512i isub[RV][RA];
  for (int v = 0; v < RV; ++v)
    for (int a = 0; a < RA; ++a) isub[v][a] = _mm512_setzero_si512();
  for (int grp = first; grp < first + kGroups; ++grp) {
    __m512i w[RV];
    for (int v = 0; v < RV; ++v) w[v] = _mm512_loadu_si512(quants + (grp * 32 + 16 * v) * 4);
    for (int a = 0; a < RA; ++a) {
      int32_t four;
      std::memcpy(&four, x_q[a] + 4 * grp, 4);
      const __m512i xb = _mm512_set1_epi32(four);
      for (int v = 0; v < RV; ++v) isub[v][a] = _mm512_dpbusd_epi32(isub[v][a], w[v], xb);
    }
  }
  for (int v = 0; v < RV; ++v) {
    const __m512i sc = _mm512_loadu_si512(scales + 16 * v * 4);
    for (int a = 0; a < RA; ++a) itot[v][a] = _mm512_add_epi32(itot[v][a], _mm512_mullo_epi32(isub[v][a], sc));
  }
}

// facc[v][a] -> output rows row + 16v.., activation row act + a; the last
// 16-row vector through the store mask `last`.
template <int RV, int RA>
void store_rows_in_lanes(const GemmArgs& g, const __m512 (&facc)[RV][RA], int64_t row, int64_t act, uint16_t last) {
  for (int a = 0; a < RA; ++a)
    for (int v = 0; v < RV; ++v)
      _mm512_mask_storeu_ps(g.out + (act + a) * g.out_stride + row + 16 * v, v == RV - 1 ? __mmask16(last) : 0xFFFF,
                            facc[v][a]);
}

// Whether a weight is in the K-quant row groups the AVX-512 kernels read in place (kLayoutQ4KGroups8Wide,
// kLayoutQ6KGroups8Wide).
inline bool avx512_k_groups(const GemmArgs& g) {
  return g.layout == kLayoutQ4KGroups8Wide || g.layout == kLayoutQ6KGroups8Wide;
}

// The dword order that splits 64 bytes of a wide K-quant group (a row per dword pair) into its two lanes: the even
// dwords (lane 2u) in the lower half, the odd (2u + 1) in the upper.
inline __m512i wide_split() { return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15); }

// Whether rows r .. r + 7 of a slice from row are one whole K-quant row group in place (avx512_k_groups; the
// slices start on a group boundary) and inside the slice's rows.
inline bool in_k_group(const GemmArgs& g, int64_t row, int r, int rows) {
  return avx512_k_groups(g) && (row + r) % 8 == 0 && r + 8 <= rows && row + r + 8 <= g.n_rows / 8 * 8;
}

// Super-block b of the K-quant row group that starts at row (8 rows' super-blocks of block_bytes each).
inline const uint8_t* k_group_block(const GemmArgs& g, int64_t row, int64_t b, int64_t block_bytes) {
  return g.w + uint64_t(row) * g.w_row_bytes + uint64_t(b) * 8 * uint64_t(block_bytes);
}

// Q4_K batches: weight rows in the int32 lanes (legacy_avx512.cpp's
// RowsInLanes for Q4_0, extended to super-blocks). Each slice of 32 weight
// rows is repacked once per call into the thread's scratch (from the GGUF's
// rows, or since stop 34 from the K-quant row groups in place, 8 rows at a
// time: from_group), per super-block:
//   d[32], dmin[32] (f32) | scale s of the 32 rows, s = 0..7 (int32) |
//   min pairs (m_2t, m_2t+1) of the 32 rows, t = 0..3 (int16 pairs) |
//   quants [sub-block 0..7][group 0..7][row 0..31][4 bytes] (u8, 0..15).
// Per sub-block, 8 vpdpbusd (16 rows' 4 quants x one activation row's 4 quants
// broadcast) give exact int32 sums, multiplied by the rows' scales and added
// up over the super-block in int32; the mins meet the activation's 32-element
// sums by vpdpwssd on int16 pairs. Then per super-block
//   acc += float(isum) * (d * d_x) - float(msum) * (dmin * d_x)
// in float, 16 (row, activation) pairs per instruction, the accumulators in
// the output's layout. Tiles of 32 rows x 4 activation rows.
struct Q4KRowsInLanes {
  static constexpr int kSlice = 32, kActs = 4;
  static constexpr int kScalesAt = 2 * kSlice * 4;
  static constexpr int kMinsAt = kScalesAt + 8 * kSlice * 4;
  static constexpr int kQuantsAt = kMinsAt + 4 * kSlice * 4;
  static constexpr int kBlockBytes = kQuantsAt + 64 * kSlice * 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= 4 && g.scratch != nullptr; }

  // Rows r .. r + 7 of the slice from their K-quant group's super-block gb (kLayoutQ4KGroups8Wide,
  // kernels/repack.h): d and dmin 8 f16 each, the 12 scale bytes as three words a row, then piece (t, j) = the 8
  // rows' bytes 32j + 4t .. 32j + 4t + 3, which are quant group t of sub-blocks 2j (low nibbles) and 2j + 1
  // (high); pieces (2u, j) and (2u + 1, j) share a 64-byte load, a row per dword pair (one vpermd splits them).
  static void from_group(const uint8_t* gb, int r, float* d, int32_t* sc, uint32_t* mn, uint32_t* q) {
    _mm256_storeu_ps(d + r, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))));
    _mm256_storeu_ps(d + kSlice + r, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16))));
    for (int i = 0; i < 8; ++i) {
      uint8_t s12[12], s8[8], m8[8];
      for (int w = 0; w < 3; ++w) std::memcpy(s12 + 4 * w, gb + 32 + 32 * w + 4 * i, 4);
      unpack_q4k_scales(s12, s8, m8);
      for (int s = 0; s < 8; ++s) sc[s * kSlice + r + i] = s8[s];
      for (int t = 0; t < 4; ++t) mn[t * kSlice + r + i] = uint32_t(m8[2 * t]) | uint32_t(m8[2 * t + 1]) << 16;
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    auto store = [&](int t, int j, __m256i v) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + ((2 * j) * 8 + t) * kSlice + r), _mm256_and_si256(v, low4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + ((2 * j + 1) * 8 + t) * kSlice + r),
                          _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
    };
    for (int u = 0; u < 4; ++u)  // lanes 2u and 2u + 1: the even and the odd dwords of 64 bytes
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_permutexvar_epi32(wide_split(), _mm512_loadu_si512(gb + q4_K_wide_piece(2 * u, j)));
        store(2 * u, j, _mm512_castsi512_si256(v));
        store(2 * u + 1, j, _mm512_extracti64x4_epi64(v, 1));
      }
  }

  // rows (1 to 32) weight rows; zero rows after them up to a multiple of 16. On the K-quant groups (stop 34) the
  // whole groups are read in place (from_group), the plain rows after the last one as the GGUF's.
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    const int padded = (rows + 15) / 16 * 16;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* d = reinterpret_cast<float*>(pb);
      int32_t* sc = reinterpret_cast<int32_t*>(pb + kScalesAt);
      uint32_t* mn = reinterpret_cast<uint32_t*>(pb + kMinsAt);
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kQuantsAt);
      for (int r = rows; r < padded; ++r) {
        d[r] = d[kSlice + r] = 0.0f;
        for (int s = 0; s < 8; ++s) sc[s * kSlice + r] = 0;
        for (int t = 0; t < 4; ++t) mn[t * kSlice + r] = 0;
        for (int e = 0; e < 64; ++e) q[e * kSlice + r] = 0;
      }
      for (int r = 0; r < rows; ++r) {
        if (in_k_group(g, row, r, rows)) {  // a whole group of 8 in place (kLayoutQ4KGroups8Wide)
          from_group(k_group_block(g, row + r, b, kQ4_KBytes), r, d, sc, mn, q);
          r += 7;
          continue;
        }
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ4_KBytes;
        d[r] = load_f16(wb);
        d[kSlice + r] = load_f16(wb + 2);
        uint8_t s8[8], m8[8];
        unpack_q4k_scales(wb + kQ4_KScales, s8, m8);
        for (int s = 0; s < 8; ++s) sc[s * kSlice + r] = s8[s];
        for (int t = 0; t < 4; ++t) mn[t * kSlice + r] = uint32_t(m8[2 * t]) | uint32_t(m8[2 * t + 1]) << 16;
        // qs bytes 32j..32j+31: sub-block 2j in the low nibbles, 2j+1 in the high.
        for (int j = 0; j < 4; ++j)
          for (int grp = 0; grp < 8; ++grp) {
            uint32_t four;
            std::memcpy(&four, wb + kQ4_KQs + 32 * j + 4 * grp, 4);
            q[((2 * j) * 8 + grp) * kSlice + r] = four & 0x0F0F0F0Fu;
            q[((2 * j + 1) * 8 + grp) * kSlice + r] = (four >> 4) & 0x0F0F0F0Fu;
          }
      }
    }
  }

  template <int RV, int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t row, int64_t act, uint16_t last) {
    const int64_t nb = g.k / 256;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 facc[RV][RA];
    for (int v = 0; v < RV; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      __m512i itot[RV][RA];
      for (int v = 0; v < RV; ++v)
        for (int a = 0; a < RA; ++a) itot[v][a] = _mm512_setzero_si512();
      const uint8_t* xq[RA];
      for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
      for (int s = 0; s < 8; ++s)  // sub-block s: quant groups 8s .. 8s + 7
        add_scaled_sub_block<RV, RA, 8>(itot, pb + kQuantsAt, pb + kScalesAt + s * kSlice * 4, 8 * s, xq);
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        // The 8 sub-block sums of 32 quants as int16 pairs (S_2t, S_2t+1).
        const __m256i s32 = _mm256_madd_epi16(load_bsums(xb), _mm256_set1_epi16(1));
        const __m256i s16 = _mm256_packs_epi32(s32, s32);  // per 128-bit half: S0-3 (S4-7) twice
        const __m512i pair[4] = {
            _mm512_set1_epi32(_mm256_extract_epi32(s16, 0)), _mm512_set1_epi32(_mm256_extract_epi32(s16, 1)),
            _mm512_set1_epi32(_mm256_extract_epi32(s16, 4)), _mm512_set1_epi32(_mm256_extract_epi32(s16, 5))};
        const __m512 xd = _mm512_set1_ps(load_f32(xb));
        for (int v = 0; v < RV; ++v) {
          __m512i msum = _mm512_setzero_si512();
          for (int t = 0; t < 4; ++t)
            msum = _mm512_dpwssd_epi32(msum, _mm512_loadu_si512(pb + kMinsAt + (t * kSlice + 16 * v) * 4), pair[t]);
          const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(pb) + 16 * v);
          const __m512 dmin = _mm512_loadu_ps(reinterpret_cast<const float*>(pb) + kSlice + 16 * v);
          facc[v][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(itot[v][a]), _mm512_mul_ps(d, xd), facc[v][a]);
          facc[v][a] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, xd), facc[v][a]);
        }
      }
    }
    store_rows_in_lanes<RV, RA>(g, facc, row, act, last);
  }
};

// Q6_K batches, the same scheme on 16 sub-blocks of 16: per super-block
//   d[32] (f32) | scale s of the 32 rows, s = 0..15 (int32, signed) |
//   scale pairs (sc_2t, sc_2t+1), t = 0..7 (int16 pairs) |
//   quants [group 0..63][row 0..31][4 bytes] (u8 q in 0..63, standing for q - 32).
// isum = sum_s sc_s * (sum over sub-block s of q * x) - 32 * sum_s sc_s * bsum_s,
// the second term by vpdpwssd of the scale pairs with the activation's bsums
// (already int16 pairs); then acc += float(isum) * (d * d_x).
struct Q6KRowsInLanes {
  static constexpr int kSlice = 32, kActs = 4;
  static constexpr int kScalesAt = kSlice * 4;
  static constexpr int kPairsAt = kScalesAt + 16 * kSlice * 4;
  static constexpr int kQuantsAt = kPairsAt + 8 * kSlice * 4;
  static constexpr int kBlockBytes = kQuantsAt + 64 * kSlice * 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= 4 && g.scratch != nullptr; }

  // Rows r .. r + 7 of the slice from their K-quant group's super-block gb (kLayoutQ6KGroups8Wide,
  // kernels/repack.h): d 8 f16, the 16 scale bytes as four words a row, then per (t, h) the triple of the 8 rows'
  // words a, b, c whose 6-bit fields are the quants of elements 128h + 32c + 4t + 0..3 (quant group
  // 32h + 8c + t): V0-V2 the low 6 bits of a, b, c, V3 their top 2 bits (repack.cpp, q6_K_encode); lanes 2u and
  // 2u + 1 of each share 64-byte loads, a row per dword pair.
  static void from_group(const uint8_t* gb, int r, float* d, int32_t* sc, uint32_t* pairs, uint32_t* q) {
    _mm256_storeu_ps(d + r, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))));
    __m256i s32[16];  // scale s of the 8 rows, sign-extended
    for (int w = 0; w < 4; ++w) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * w));
      s32[4 * w] = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24);
      s32[4 * w + 1] = _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 24);
      s32[4 * w + 2] = _mm256_srai_epi32(_mm256_slli_epi32(v, 8), 24);
      s32[4 * w + 3] = _mm256_srai_epi32(v, 24);
    }
    for (int s = 0; s < 16; ++s) _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc + s * kSlice + r), s32[s]);
    for (int t = 0; t < 8; ++t)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + t * kSlice + r),
                          _mm256_blend_epi16(s32[2 * t], _mm256_slli_epi32(s32[2 * t + 1], 16), 0xAA));
    const __m512i k6 = _mm512_set1_epi8(0x3F), k2 = _mm512_set1_epi8(0x03);
    // V0-V3 of lanes t and t + 1, 8 rows a 32-byte half.
    auto quants = [&](__m512i a, __m512i bq, __m512i c, __m512i v[4]) {
      v[0] = _mm512_and_si512(a, k6);
      v[1] = _mm512_and_si512(bq, k6);
      v[2] = _mm512_and_si512(c, k6);
      v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 6), k2),
                             _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(bq, 6), k2), 2),
                                             _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(c, 6), k2), 4)));
    };
    auto store = [&](int t, int h, int cc, __m256i v) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + (32 * h + 8 * cc + t) * kSlice + r), v);
    };
    for (int t = 0; t < 8; t += 2)
      for (int h = 0; h < 2; ++h) {
        auto load = [&](int which) {  // lanes t and t + 1: the even and the odd dwords of each 64 bytes
          return _mm512_permutexvar_epi32(wide_split(), _mm512_loadu_si512(gb + q6_K_wide_piece(t, h, which)));
        };
        __m512i v[4];
        quants(load(0), load(1), load(2), v);
        for (int cc = 0; cc < 4; ++cc) {
          store(t, h, cc, _mm512_castsi512_si256(v[cc]));
          store(t + 1, h, cc, _mm512_extracti64x4_epi64(v[cc], 1));
        }
      }
  }

  // rows (1 to 32) weight rows; zero rows after them up to a multiple of 16. On the K-quant groups (stop 34) the
  // whole groups are read in place (from_group, after the gather of the other rows' quants), the plain rows
  // after the last one as the GGUF's.
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    const int padded = (rows + 15) / 16 * 16;
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lo2 = _mm512_set1_epi8(0x03);
    alignas(64) uint32_t tmp[kSlice][64] = {};  // a row's 256 quants in element order
    int grouped = 0;                            // leading rows in whole groups (the plain rows come after them)
    while (grouped < rows && in_k_group(g, row, grouped, rows)) grouped += 8;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* d = reinterpret_cast<float*>(pb);
      int32_t* sc = reinterpret_cast<int32_t*>(pb + kScalesAt);
      uint32_t* pairs = reinterpret_cast<uint32_t*>(pb + kPairsAt);
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kQuantsAt);
      for (int r = rows; r < padded; ++r) {
        d[r] = 0.0f;
        for (int s = 0; s < 16; ++s) sc[s * kSlice + r] = 0;
        for (int t = 0; t < 8; ++t) pairs[t * kSlice + r] = 0;
      }
      for (int r = grouped; r < rows; ++r) {
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ6_KBytes;
        d[r] = load_f16(wb + kQ6_KD);
        const int8_t* s8 = reinterpret_cast<const int8_t*>(wb + kQ6_KScales);
        for (int s = 0; s < 16; ++s) sc[s * kSlice + r] = s8[s];
        for (int t = 0; t < 8; ++t)
          pairs[t * kSlice + r] = uint32_t(uint16_t(s8[2 * t])) | uint32_t(uint16_t(s8[2 * t + 1])) << 16;
        for (int half = 0; half < 2; ++half) {  // as Q6KKernel: elements 128h + 0..63 (qA) and 64..127 (qB)
          const __m512i ql = _mm512_loadu_si512(wb + 64 * half);
          const __m512i qh =
              _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + kQ6_KQh + 32 * half)));
          const __m512i hA = _mm512_mask_srli_epi16(qh, kUpper16, qh, 2);
          const __m512i hB = _mm512_mask_srli_epi16(_mm512_srli_epi16(qh, 4), kUpper16, _mm512_srli_epi16(qh, 4), 2);
          _mm512_store_si512(&tmp[r][32 * half], _mm512_or_si512(_mm512_and_si512(ql, lo4),
                                                                 _mm512_slli_epi16(_mm512_and_si512(hA, lo2), 4)));
          _mm512_store_si512(&tmp[r][32 * half + 16], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
                                                                      _mm512_slli_epi16(_mm512_and_si512(hB, lo2), 4)));
        }
      }
      const __m512i index = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(64));
      if (grouped < padded)
        for (int grp = 0; grp < 64; ++grp)
          for (int h = grouped / 16; h < padded / 16; ++h)
            _mm512_storeu_si512(q + grp * kSlice + 16 * h, _mm512_i32gather_epi32(index, &tmp[16 * h][grp], 4));
      for (int r = 0; r < grouped; r += 8) from_group(k_group_block(g, row + r, b, kQ6_KBytes), r, d, sc, pairs, q);
    }
  }

  template <int RV, int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t row, int64_t act, uint16_t last) {
    const int64_t nb = g.k / 256;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m512 facc[RV][RA];
    for (int v = 0; v < RV; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      __m512i itot[RV][RA];
      for (int a = 0; a < RA; ++a) {  // -32 * sum_s sc_s * bsum_s
        const uint8_t* bs = x[a] + b * kQ8_KBytes + kQ8_KBsums;
        for (int v = 0; v < RV; ++v) {
          __m512i c = _mm512_setzero_si512();
          for (int t = 0; t < 8; ++t) {
            int32_t two;
            std::memcpy(&two, bs + 4 * t, 4);
            c = _mm512_dpwssd_epi32(c, _mm512_loadu_si512(pb + kPairsAt + (t * kSlice + 16 * v) * 4),
                                    _mm512_set1_epi32(two));
          }
          itot[v][a] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(c, 5));
        }
      }
      const uint8_t* xq[RA];
      for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
      for (int s = 0; s < 16; ++s)  // sub-block s: quant groups 4s .. 4s + 3
        add_scaled_sub_block<RV, RA, 4>(itot, pb + kQuantsAt, pb + kScalesAt + s * kSlice * 4, 4 * s, xq);
      for (int a = 0; a < RA; ++a) {
        const __m512 xd = _mm512_set1_ps(load_f32(x[a] + b * kQ8_KBytes));
        for (int v = 0; v < RV; ++v) {
          const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(pb) + 16 * v);
          facc[v][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(itot[v][a]), _mm512_mul_ps(d, xd), facc[v][a]);
        }
      }
    }
    store_rows_in_lanes<RV, RA>(g, facc, row, act, last);
  }
};

// Batches of up to kSmallBatch rows: the decode tiles (4 weight rows, with
// their prefetch) meet every activation row while the rows are in L1, so the
// weights are streamed once; larger batches rows in the lanes.
constexpr int64_t kSmallBatch = 4;

}  // namespace

void gemm_q4_K(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch) drive<Q45KKernel<false>, 4, 1>(g);
  else if (Q4KRowsInLanes::applies(g)) RowsInLanesDriver<Q4KRowsInLanes>::run(g);
  else gemm_entry<Q45KKernel<false>, 2, 4, 4>(g);
}
int64_t q4_K_scratch_floats(int64_t k) { return k / 256 * Q4KRowsInLanes::kBlockBytes / 4; }
void gemm_q5_K(const GemmArgs& g) { gemm_entry<Q45KKernel<true>, 2, 4, 4>(g); }
void gemm_q6_K(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch) drive<Q6KKernel, 4, 1>(g);
  else if (Q6KRowsInLanes::applies(g)) RowsInLanesDriver<Q6KRowsInLanes>::run(g);
  else gemm_entry<Q6KKernel, 2, 4, 4>(g);
}
int64_t q6_K_scratch_floats(int64_t k) { return k / 256 * Q6KRowsInLanes::kBlockBytes / 4; }

// The rows-in-lanes batch kernels on the K-quant groups in place (stop 34): their repack reads a whole group's
// super-block at once where MUL_MAT used to unpack 32 rows to the GGUF's layout for them. They need the scratch
// and a slice of whole groups (the plain rows after the last one may end it).
bool whole_groups_slice(const GemmArgs& g) {
  if (!avx512_k_groups(g)) return false;
  if (g.row_begin % 8 != 0 || (g.row_end % 8 != 0 && g.row_end != g.n_rows))
    fail("K-quant row-group prompt gemm: slice [{}, {}) of {} rows does not hold whole groups", g.row_begin, g.row_end,
         g.n_rows);
  return true;
}
bool gemm_q4_K_groups_rows_in_lanes(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || !Q4KRowsInLanes::applies(g) || !whole_groups_slice(g)) return false;
  RowsInLanesDriver<Q4KRowsInLanes>::run(g);
  return true;
}
bool gemm_q6_K_groups_rows_in_lanes(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || !Q6KRowsInLanes::applies(g) || !whole_groups_slice(g)) return false;
  RowsInLanesDriver<Q6KRowsInLanes>::run(g);
  return true;
}

}  // namespace opal::cpu::avx512
#endif  // x86
