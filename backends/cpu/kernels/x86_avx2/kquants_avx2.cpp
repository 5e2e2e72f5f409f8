// Q4_K, Q5_K, Q6_K weights x Q8_K activations with AVX2: the scheme of
// x86_avx512/kquants_avx512.cpp (see there) on 256-bit registers, one
// 32-element sub-block (Q4_K/Q5_K) or two 16-element sub-blocks (Q6_K) per
// register: vpmaddubsw(q_u8, x_s8) -> int16 pairs, vpmaddwd(pairs, scale16)
// -> int32 (exact), added into an int32 sum per super-block.
// Tiles: 2 weight rows x 2 activation rows; decode 4 x 1 (Q6_K; Q4_K rows of
// up to 1024 elements) or 2 x 1 (the rest); Q4_K and Q6_K
// batches of 4 rows or more with weight rows in the lanes (Q4KRowsInLanes,
// Q6KRowsInLanes). Q4_K decode and 2-3 rows follow the lanes order too where it
// is selected (stop 26: q4_K_super_block_exact, Q45KKernel<false, true>).
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2 {
namespace {

// The 8 six-bit scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K/Q5_K
// super-block from its 12 packed bytes, on 32-bit words (no per-byte loop).
__m128i q4k_scales_mins(const uint8_t* q) {
  uint32_t u[3];
  std::memcpy(u, q, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  return _mm_setr_epi32(int(u[0] & m6),                                        // scales 0-3
                        int((u[2] & m4) | (((u[0] >> 6) & m2) << 4)),          // scales 4-7
                        int(u[1] & m6),                                        // mins 0-3
                        int(((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)));  // mins 4-7
}
// Each min twice (one per 16-element bsum), as int16.
__m256i mins16(__m128i sm) {
  const __m128i m8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
  return _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
}
// Scale s (int16 lane s of the broadcast scales) in every int16 lane.
__m256i spread16(__m256i scales16, int s) {
  return _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(short(((2 * s + 1) << 8) | (2 * s))));
}
__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// kExact (Q4_K where q4_K_super_block_exact, stop 26): the lanes order of the
// batch kernels instead of llama.cpp's 8 float lanes: the super-block's 8 int32
// lanes summed exactly (and the mins' likewise), then per super-block
// acc = fma(float(isum), d * d_x, acc), acc = fnmadd(float(msum), dmin * d_x, acc)
// on one float per row: the bits of q4_K_group_pairs_lanes and Q4KRowsInLanes.
template <bool kFive, bool kExact = false>
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
    __m256 acc[RW][RA];
    float exact[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) {
        acc[i][a] = _mm256_setzero_ps();
        exact[i][a] = 0.0f;
      }
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (RA == 1)  // decode: the same super-block of the rows three tiles on (a prefetch does not fault)
        for (int i = 0; i < RW; ++i)
          for (int l = 0; l < kBytes; l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(w[i]) + b * kBytes + 3 * RW * g.w_row_bytes + l, _MM_HINT_T0);
      __m128i sm[RW];
      __m256i sc16[RW];
      for (int i = 0; i < RW; ++i) {
        sm[i] = q4k_scales_mins(w[i] + b * kBytes + kQ4_KScales);
        sc16[i] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm[i]));
      }
      __m256i isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        for (int i = 0; i < RW; ++i) {
          const uint8_t* wb = w[i] + b * kBytes;
          const __m256i v = load32(wb + kQs + 32 * j);
          __m256i qlo = _mm256_and_si256(v, lo4), qhi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
          if constexpr (kFive) {
            const __m256i qh = load32(wb + kQ5_KQh);
            const __m256i blo = _mm256_set1_epi8(char(1 << (2 * j))), bhi = _mm256_set1_epi8(char(1 << (2 * j + 1)));
            const __m256i sixteen = _mm256_set1_epi8(16);
            qlo = _mm256_or_si256(qlo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, blo), blo), sixteen));
            qhi = _mm256_or_si256(qhi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bhi), bhi), sixteen));
          }
          const __m256i slo = spread16(sc16[i], 2 * j), shi = spread16(sc16[i], 2 * j + 1);
          for (int a = 0; a < RA; ++a) {
            const uint8_t* xq = x[a] + b * kQ8_KBytes + kQ8_KQs + 64 * j;
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(qlo, load32(xq)), slo);
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(qhi, load32(xq + 32)), shi);
            isum[i][a] = _mm256_add_epi32(isum[i][a], _mm256_add_epi32(plo, phi));
          }
        }
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * kBytes;
        const float d = load_f16(wb), dmin = load_f16(wb + 2);
        const __m256i m16 = mins16(sm[i]);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xb = x[a] + b * kQ8_KBytes;
          const float xd = load_f32(xb);
          const __m256i mi = _mm256_madd_epi16(load32(xb + kQ8_KBsums), m16);
          if constexpr (kExact) {
            exact[i][a] = std::fma(float(hsum8_epi32(isum[i][a])), d * xd, exact[i][a]);
            exact[i][a] = std::fma(-float(hsum8_epi32(mi)), dmin * xd, exact[i][a]);
          } else {
            acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][a]), _mm256_set1_ps(d * xd), acc[i][a]);
            acc[i][a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi), _mm256_set1_ps(dmin * xd), acc[i][a]);
          }
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = kExact ? exact[i][a] : hsum8(acc[i][a]);
  }
};

// Q6_K: per 128-element half g and t in 0..3, the register of elements
// 128g + 32t .. +31 (sub-blocks 8g + 2t, 8g + 2t + 1): low nibbles of ql bytes
// 64g + 32(t%2) .. (t < 2) or their high nibbles (t >= 2), and bits 2t, 2t+1 of qh.
struct Q6KKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 256;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m256 acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (RA == 1)  // decode: the same super-block of the rows three tiles on (a prefetch does not fault)
        for (int i = 0; i < RW; ++i)
          for (int l = 0; l < kQ6_KBytes; l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(w[i]) + b * kQ6_KBytes + 3 * RW * g.w_row_bytes + l,
                         _MM_HINT_T0);
      __m256i isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half)
        for (int i = 0; i < RW; ++i) {
          const uint8_t* wb = w[i] + b * kQ6_KBytes;
          const int8_t* sc = reinterpret_cast<const int8_t*>(wb + kQ6_KScales);
          const __m256i qh = load32(wb + kQ6_KQh + 32 * half);
          // This half's 8 scales as int16 in both 128-bit lanes.
          const __m256i sc8 = _mm256_broadcastsi128_si256(
              _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8 * half))));
          for (int t = 0; t < 4; ++t) {
            const __m256i ql = load32(wb + 64 * half + 32 * (t % 2));
            const __m256i lo = t < 2 ? _mm256_and_si256(ql, lo4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo4);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), lo2), 4);
            const __m256i q = _mm256_or_si256(lo, hi);
            // scale 2t in the low lane, 2t + 1 in the high lane
            const __m256i sv =
                _mm256_shuffle_epi8(sc8, _mm256_set_m128i(_mm_set1_epi16(short(((4 * t + 3) << 8) | (4 * t + 2))),
                                                          _mm_set1_epi16(short(((4 * t + 1) << 8) | (4 * t)))));
            for (int a = 0; a < RA; ++a) {
              const uint8_t* xq = x[a] + b * kQ8_KBytes + kQ8_KQs + 128 * half + 32 * t;
              isum[i][a] = _mm256_add_epi32(isum[i][a], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(xq)), sv));
            }
          }
        }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * kQ6_KBytes;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + kQ6_KScales)));
        const float d = load_f16(wb + kQ6_KD);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xb = x[a] + b * kQ8_KBytes;
          const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load32(xb + kQ8_KBsums), sc16), 5);
          const __m256i s = _mm256_sub_epi32(isum[i][a], corr);
          acc[i][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * load_f32(xb)), acc[i][a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = hsum8(acc[i][a]);
  }
};

// Q4_K batches (4 activation rows or more): weight rows in the int32 lanes,
// as q4_0_avx2.cpp does for Q4_0. Each slice of 16 weight rows is repacked
// once per call into the thread's scratch, per super-block:
//   d[16], dmin[16]          f32
//   scale[8][16]             int32 = the sub-block's 6-bit scale in both int16 halves
//   minpair[4][16]           int32 = int16 pair (m_2t, m_2t+1)
//   quants[64][16]           4 unsigned nibbles of each group of 4 elements
// A sub-block's 8 groups meet one activation row's 4 bytes (broadcast) by
// vpmaddubsw and add in int16 (at most 8 * 3810); vpmaddwd by the scale
// pairs gives the 8 rows' exact scaled sums in int32, added over the
// super-block. The mins meet the activation's 32-element sums (pairs of
// bsums) by vpmaddwd on int16 pairs. Then per super-block, as Q45KKernel:
// acc += isum * (d * d_x), acc -= mins * (dmin * d_x).
struct Q4KRowsInLanes {
  static constexpr int kSlice = 16;
  static constexpr int kSuperBytes = kSlice * (4 + 4 + 8 * 4 + 4 * 4 + 64 * 4);
  static constexpr int kActs = 3;
  static constexpr int kD = 0, kDmin = kSlice * 4, kScale = kSlice * 8, kMins = kScale + 8 * kSlice * 4,
                       kQuants = kMins + 4 * kSlice * 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= 4 && g.scratch != nullptr; }

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kSuperBytes;
      float* d = reinterpret_cast<float*>(pb + kD);
      float* dmin = reinterpret_cast<float*>(pb + kDmin);
      uint32_t* scale = reinterpret_cast<uint32_t*>(pb + kScale);
      uint32_t* mins = reinterpret_cast<uint32_t*>(pb + kMins);
      uint32_t* quants = reinterpret_cast<uint32_t*>(pb + kQuants);
      alignas(32) uint32_t tmp[64];
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {
          d[r] = dmin[r] = 0.0f;
          for (int j = 0; j < 8; ++j) scale[j * kSlice + r] = 0;
          for (int t = 0; t < 4; ++t) mins[t * kSlice + r] = 0;
          for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = 0;
          continue;
        }
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ4_KBytes;
        d[r] = load_f16(wb);
        dmin[r] = load_f16(wb + 2);
        alignas(16) uint8_t sm[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(sm), q4k_scales_mins(wb + kQ4_KScales));
        for (int j = 0; j < 8; ++j) scale[j * kSlice + r] = uint32_t(sm[j]) * 0x10001u;
        for (int t = 0; t < 4; ++t) mins[t * kSlice + r] = uint32_t(sm[8 + 2 * t]) | (uint32_t(sm[9 + 2 * t]) << 16);
        for (int j = 0; j < 4; ++j) {
          const __m256i v = load32(wb + kQ4_KQs + 32 * j);
          _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 16 * j), _mm256_and_si256(v, lo4));
          _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 16 * j + 8),
                             _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4));
        }
        for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = tmp[grp];
      }
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out16[]) {
    const int64_t nb = g.k / 256;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    for (int a = 0; a < RA; ++a) std::memset(out16[a], 0, sizeof(float) * kSlice);  // the float accumulators
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kSuperBytes;
      __m256i isum[2][RA];
      for (int v = 0; v < 2; ++v)
        for (int a = 0; a < RA; ++a) isum[v][a] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        __m256i i16[2][RA];
        for (int v = 0; v < 2; ++v)  // set before the first group (which overwrites them): no uninitialized reads
          for (int a = 0; a < RA; ++a) i16[v][a] = _mm256_setzero_si256();
        for (int t = 0; t < 8; ++t) {
          const uint8_t* pq = pb + kQuants + (8 * j + t) * kSlice * 4;
          const __m256i w0 = load32(pq), w1 = load32(pq + 32);
          for (int a = 0; a < RA; ++a) {
            int32_t four;
            std::memcpy(&four, x[a] + b * kQ8_KBytes + kQ8_KQs + 32 * j + 4 * t, 4);
            const __m256i xb = _mm256_set1_epi32(four);
            const __m256i p0 = _mm256_maddubs_epi16(w0, xb), p1 = _mm256_maddubs_epi16(w1, xb);
            i16[0][a] = t == 0 ? p0 : in_register(_mm256_add_epi16(i16[0][a], p0));
            i16[1][a] = t == 0 ? p1 : in_register(_mm256_add_epi16(i16[1][a], p1));
          }
        }
        const __m256i s0 = load32(pb + kScale + j * kSlice * 4), s1 = load32(pb + kScale + j * kSlice * 4 + 32);
        for (int a = 0; a < RA; ++a) {
          isum[0][a] = _mm256_add_epi32(isum[0][a], _mm256_madd_epi16(i16[0][a], s0));
          isum[1][a] = _mm256_add_epi32(isum[1][a], _mm256_madd_epi16(i16[1][a], s1));
        }
      }
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        // the 8 sub-blocks' activation sums (pairs of bsums) as int16 pairs (2t, 2t + 1)
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums)),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums + 16)));
        __m256i m[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        const __m256i p0 = _mm256_set1_epi32(_mm_extract_epi32(bs, 0)),
                      p1 = _mm256_set1_epi32(_mm_extract_epi32(bs, 1));
        const __m256i p2 = _mm256_set1_epi32(_mm_extract_epi32(bs, 2)),
                      p3 = _mm256_set1_epi32(_mm_extract_epi32(bs, 3));
        for (int v = 0; v < 2; ++v) {
          const uint8_t* pm = pb + kMins + 32 * v;
          m[v] = _mm256_madd_epi16(load32(pm), p0);
          m[v] = _mm256_add_epi32(m[v], _mm256_madd_epi16(load32(pm + kSlice * 4), p1));
          m[v] = _mm256_add_epi32(m[v], _mm256_madd_epi16(load32(pm + 2 * kSlice * 4), p2));
          m[v] = _mm256_add_epi32(m[v], _mm256_madd_epi16(load32(pm + 3 * kSlice * 4), p3));
        }
        const __m256 xd = _mm256_set1_ps(load_f32(xb));
        for (int v = 0; v < 2; ++v) {
          const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kD) + 8 * v);
          const __m256 dmin = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kDmin) + 8 * v);
          __m256 acc = _mm256_loadu_ps(out16[a] + 8 * v);
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v][a]), _mm256_mul_ps(d, xd), acc);
          _mm256_storeu_ps(out16[a] + 8 * v, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m[v]), _mm256_mul_ps(dmin, xd), acc));
        }
      }
    }
  }
};

// Q6_K batches (4 activation rows or more): the scheme of Q4KRowsInLanes on 16
// sub-blocks of 16 elements. Per super-block and 16-row slice:
//   d[16]                    f32
//   scale[16][16]            int32 = the sub-block's signed scale in both int16 halves
//   pair[8][16]              int32 = int16 pair (sc_2t, sc_2t+1)
//   quants[64][16]           4 unsigned 6-bit quants (q in 0..63 stands for q - 32)
// vpmaddubsw of a group (8 rows' 4 quants) with one activation row's 4 quants
// gives int16 pairs of at most 2 * 63 * 128; two groups add in int16 (32256,
// no saturation) and vpmaddwd by the scale pair gives the 8 rows' scaled sums
// in int32, added over the super-block. The offset -32 * sum_s sc_s * bsum_s
// starts the sum (vpmaddwd of the scale pairs with the activation's bsums,
// already int16 pairs). Then acc = fma(float(isum), d * d_x, acc): the AVX-512
// rows-in-lanes kernel's order, so the same bits.
struct Q6KRowsInLanes {
  static constexpr int kSlice = 16;
  static constexpr int kActs = 3;
  static constexpr int kScale = kSlice * 4, kPairs = kScale + 16 * kSlice * 4, kQuants = kPairs + 8 * kSlice * 4;
  static constexpr int kSuperBytes = kQuants + 64 * kSlice * 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= 4 && g.scratch != nullptr; }

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kSuperBytes;
      float* d = reinterpret_cast<float*>(pb);
      uint32_t* scale = reinterpret_cast<uint32_t*>(pb + kScale);
      uint32_t* pair = reinterpret_cast<uint32_t*>(pb + kPairs);
      uint32_t* quants = reinterpret_cast<uint32_t*>(pb + kQuants);
      alignas(32) uint32_t tmp[64];  // a row's 256 quants in element order
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {
          d[r] = 0.0f;
          for (int s = 0; s < 16; ++s) scale[s * kSlice + r] = 0;
          for (int t = 0; t < 8; ++t) pair[t * kSlice + r] = 0;
          for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = 0;
          continue;
        }
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ6_KBytes;
        d[r] = load_f16(wb + kQ6_KD);
        const int8_t* s8 = reinterpret_cast<const int8_t*>(wb + kQ6_KScales);
        for (int s = 0; s < 16; ++s) scale[s * kSlice + r] = uint32_t(uint16_t(s8[s])) * 0x10001u;
        for (int t = 0; t < 8; ++t)
          pair[t * kSlice + r] = uint32_t(uint16_t(s8[2 * t])) | uint32_t(uint16_t(s8[2 * t + 1])) << 16;
        for (int half = 0; half < 2; ++half) {
          const __m256i qh = load32(wb + kQ6_KQh + 32 * half);
          for (int t = 0; t < 4; ++t) {  // elements 128 half + 32 t .. + 31, as Q6KKernel
            const __m256i ql = load32(wb + 64 * half + 32 * (t % 2));
            const __m256i lo = t < 2 ? _mm256_and_si256(ql, lo4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo4);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), lo2), 4);
            _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 32 * half + 8 * t), _mm256_or_si256(lo, hi));
          }
        }
        for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = tmp[grp];
      }
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out16[]) {
    const int64_t nb = g.k / 256;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    __m256 facc[2][RA];
    for (int v = 0; v < 2; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kSuperBytes;
      __m256i isum[2][RA];
      for (int a = 0; a < RA; ++a) {  // -32 * sum_s sc_s * bsum_s
        const uint8_t* bs = x[a] + b * kQ8_KBytes + kQ8_KBsums;
        for (int v = 0; v < 2; ++v) {
          __m256i c = _mm256_setzero_si256();
          for (int t = 0; t < 8; ++t) {
            int32_t two;
            std::memcpy(&two, bs + 4 * t, 4);
            c = _mm256_add_epi32(
                c, _mm256_madd_epi16(load32(pb + kPairs + (t * kSlice + 8 * v) * 4), _mm256_set1_epi32(two)));
          }
          isum[v][a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
        }
      }
      for (int s = 0; s < 16; ++s) {
        const __m256i s0 = load32(pb + kScale + s * kSlice * 4), s1 = load32(pb + kScale + s * kSlice * 4 + 32);
        for (int h = 0; h < 2; ++h) {  // groups 4s + 2h, 4s + 2h + 1
          __m256i i16[2][RA];
          for (int v = 0; v < 2; ++v)
            for (int a = 0; a < RA; ++a) i16[v][a] = _mm256_setzero_si256();
          for (int u = 0; u < 2; ++u) {
            const int grp = 4 * s + 2 * h + u;
            const uint8_t* pq = pb + kQuants + grp * kSlice * 4;
            const __m256i w0 = load32(pq), w1 = load32(pq + 32);
            for (int a = 0; a < RA; ++a) {
              int32_t four;
              std::memcpy(&four, x[a] + b * kQ8_KBytes + kQ8_KQs + 4 * grp, 4);
              const __m256i xb = _mm256_set1_epi32(four);
              const __m256i p0 = _mm256_maddubs_epi16(w0, xb), p1 = _mm256_maddubs_epi16(w1, xb);
              i16[0][a] = u == 0 ? p0 : in_register(_mm256_add_epi16(i16[0][a], p0));
              i16[1][a] = u == 0 ? p1 : in_register(_mm256_add_epi16(i16[1][a], p1));
            }
          }
          for (int a = 0; a < RA; ++a) {
            isum[0][a] = _mm256_add_epi32(isum[0][a], _mm256_madd_epi16(i16[0][a], s0));
            isum[1][a] = _mm256_add_epi32(isum[1][a], _mm256_madd_epi16(i16[1][a], s1));
          }
        }
      }
      for (int a = 0; a < RA; ++a) {
        const __m256 xd = _mm256_set1_ps(load_f32(x[a] + b * kQ8_KBytes));
        for (int v = 0; v < 2; ++v) {
          const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(pb) + 8 * v);
          facc[v][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v][a]), _mm256_mul_ps(d, xd), facc[v][a]);
        }
      }
    }
    for (int a = 0; a < RA; ++a) {
      _mm256_storeu_ps(out16[a], facc[0][a]);
      _mm256_storeu_ps(out16[a] + 8, facc[1][a]);
    }
  }
};

}  // namespace

bool q4_K_super_block_exact(const GemmArgs& g) {
  return !g.single_rows && g.scratch != nullptr && lanes_order(DType::Q4_K);
}

int64_t q4_K_scratch_floats(int64_t k) { return k / 256 * Q4KRowsInLanes::kSuperBytes / 4 + 8; }

// Decode tiles (bench_matmul_kernels, CPU time, loaded host, best of 3):
// Q4_K 4 rows for rows of up to 4 super-blocks (decode-1024 10.6 -> 12.6
// GB/s), 2 rows beyond (decode-2048 14.0 with 2, 12.6 with 4); Q6_K 4 rows
// (13-15 -> 15-20 GB/s at K = 1024 and 2048). Each row's order is the same
// whatever the tile, so the results are too. Under q4_K_super_block_exact
// (stop 26) the same tiles in the lanes order (Q45KKernel<false, true>).
void gemm_q4_K(const GemmArgs& g) {
  if (Q4KRowsInLanes::applies(g)) SliceDriver<Q4KRowsInLanes>::run(g);
  else if (q4_K_super_block_exact(g)) {
    if (g.n_act == 1 && g.k <= 1024) drive<Q45KKernel<false, true>, 4, 1>(g);
    else gemm_entry<Q45KKernel<false, true>, 2, 2, 2>(g);
  } else if (g.n_act == 1 && g.k <= 1024) drive<Q45KKernel<false>, 4, 1>(g);
  else gemm_entry<Q45KKernel<false>, 2, 2, 2>(g);
}
void gemm_q5_K(const GemmArgs& g) { gemm_entry<Q45KKernel<true>, 2, 2, 2>(g); }
void gemm_q6_K(const GemmArgs& g) {
  if (Q6KRowsInLanes::applies(g)) SliceDriver<Q6KRowsInLanes>::run(g);
  else gemm_entry<Q6KKernel, 2, 2, 4>(g);
}
int64_t q6_K_scratch_floats(int64_t k) { return k / 256 * Q6KRowsInLanes::kSuperBytes / 4 + 8; }

}  // namespace opal::cpu::avx2
#endif  // x86
