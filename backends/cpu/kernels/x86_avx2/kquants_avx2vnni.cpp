// Q4_K and Q6_K prompt batches with AVX-VNNI (the avx2-vnni ISA): the AVX2
// rows-in-lanes kernels of kquants_avx2.cpp with vpdpbusd for the quant
// products. Decode and batches of up to 3 rows stay on the plain AVX2 kernels.
//
// Weight rows in the int32 lanes, 16-row slices repacked once per call into
// the thread's scratch (SliceDriver), per super-block:
//   Q4_K: d[16], dmin[16] f32 | scale[8][16] int32 (6-bit, unsigned) |
//         minpair[4][16] int16 pairs (m_2t, m_2t+1) | quants[64][16] (4 u8
//         nibbles of a group of 4 elements, sub-block s = groups 8s..8s+7)
//   Q6_K: d[16] f32 | scale[16][16] int32 (signed) | pair[8][16] int16 pairs
//         (sc_2t, sc_2t+1) | quants[64][16] (4 u8 q in 0..63 standing for
//         q - 32, sub-block s = groups 4s..4s+3)
// Per sub-block, vpdpbusd of a group (8 rows' 4 quants) with one activation
// row's 4 quants (broadcast) adds the 8 rows' exact products into an int32
// sub-block sum (at most 32 * 15 * 127, resp. 16 * 63 * 127); vpmulld by the
// rows' scales adds it into the super-block's int32 sum. Q4_K's mins meet the
// activation's 32-element sums, Q6_K's -32 offset the 16-element bsums, both
// by vpdpwssd on int16 pairs. Then per super-block, in float, as the AVX2
// kernels: Q4_K acc = fma(float(isum), d * d_x, acc), acc = fnmadd(float(msum),
// dmin * d_x, acc); Q6_K acc = fma(float(isum), d * d_x, acc). The int32 sums
// are exact on both ISAs, so avx2-vnni gives avx2's bits.
// Tiles of 16 rows x 3 activation rows (6 int32 super-block sums, 6 sub-block
// sums, 2 weight vectors and the broadcast: 15 ymm registers).
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"

namespace opal::cpu::avx2vnni {
namespace {

constexpr int64_t kKQuantSmallBatch = 3;  // batches up to this size: the plain AVX2 kernels

__m256i kq_load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// isum[v][a] += scale * (sum over kGroups quant groups from `first` of the
// packed u8 quants x activation row a's quants at x_q[a]), the 16 rows' int32
// scales at `scales`.
template <int RA, int kGroups>
[[gnu::always_inline]] inline void kq_add_sub_block(__m256i (&isum)[2][RA], const uint8_t* quants,
                                                    const uint8_t* scales, int first, const uint8_t* const* x_q) {
  __m256i isub[2][RA];
  for (int v = 0; v < 2; ++v)
    for (int a = 0; a < RA; ++a) isub[v][a] = _mm256_setzero_si256();
  for (int grp = first; grp < first + kGroups; ++grp) {
    const __m256i w0 = kq_load32(quants + grp * 16 * 4), w1 = kq_load32(quants + grp * 16 * 4 + 32);
    for (int a = 0; a < RA; ++a) {
      int32_t four;
      std::memcpy(&four, x_q[a] + 4 * grp, 4);
      const __m256i xb = _mm256_set1_epi32(four);
      isub[0][a] = _mm256_dpbusd_avx_epi32(isub[0][a], w0, xb);
      isub[1][a] = _mm256_dpbusd_avx_epi32(isub[1][a], w1, xb);
    }
  }
  const __m256i s0 = kq_load32(scales), s1 = kq_load32(scales + 32);
  for (int a = 0; a < RA; ++a) {
    isum[0][a] = _mm256_add_epi32(isum[0][a], _mm256_mullo_epi32(isub[0][a], s0));
    isum[1][a] = _mm256_add_epi32(isum[1][a], _mm256_mullo_epi32(isub[1][a], s1));
  }
}

struct Q4KVnniLanes {
  static constexpr int kSlice = 16, kActs = 3;
  static constexpr int kD = 0, kDmin = kSlice * 4, kScale = kSlice * 8, kMins = kScale + 8 * kSlice * 4,
                       kQuants = kMins + 4 * kSlice * 4;
  static constexpr int kSuperBytes = kQuants + 64 * kSlice * 4;

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kSuperBytes;
      float* d = reinterpret_cast<float*>(pb + kD);
      float* dmin = reinterpret_cast<float*>(pb + kDmin);
      int32_t* scale = reinterpret_cast<int32_t*>(pb + kScale);
      uint32_t* mins = reinterpret_cast<uint32_t*>(pb + kMins);
      uint32_t* quants = reinterpret_cast<uint32_t*>(pb + kQuants);
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {  // zero rows up to the slice
          d[r] = dmin[r] = 0.0f;
          for (int s = 0; s < 8; ++s) scale[s * kSlice + r] = 0;
          for (int t = 0; t < 4; ++t) mins[t * kSlice + r] = 0;
          for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = 0;
          continue;
        }
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ4_KBytes;
        d[r] = load_f16(wb);
        dmin[r] = load_f16(wb + 2);
        uint8_t s8[8], m8[8];
        unpack_q4k_scales(wb + kQ4_KScales, s8, m8);
        for (int s = 0; s < 8; ++s) scale[s * kSlice + r] = s8[s];
        for (int t = 0; t < 4; ++t) mins[t * kSlice + r] = uint32_t(m8[2 * t]) | uint32_t(m8[2 * t + 1]) << 16;
        // qs bytes 32j..32j+31: sub-block 2j in the low nibbles, 2j+1 in the high.
        for (int j = 0; j < 4; ++j)
          for (int grp = 0; grp < 8; ++grp) {
            uint32_t four;
            std::memcpy(&four, wb + kQ4_KQs + 32 * j + 4 * grp, 4);
            quants[(16 * j + grp) * kSlice + r] = four & 0x0F0F0F0Fu;
            quants[(16 * j + 8 + grp) * kSlice + r] = (four >> 4) & 0x0F0F0F0Fu;
          }
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
      for (int v = 0; v < 2; ++v)
        for (int a = 0; a < RA; ++a) isum[v][a] = _mm256_setzero_si256();
      const uint8_t* xq[RA];
      for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
      for (int s = 0; s < 8; ++s) kq_add_sub_block<RA, 8>(isum, pb + kQuants, pb + kScale + s * kSlice * 4, 8 * s, xq);
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        // the 8 sub-blocks' activation sums (pairs of bsums) as int16 pairs (2t, 2t + 1)
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums)),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums + 16)));
        const __m256i p[4] = {_mm256_set1_epi32(_mm_extract_epi32(bs, 0)), _mm256_set1_epi32(_mm_extract_epi32(bs, 1)),
                              _mm256_set1_epi32(_mm_extract_epi32(bs, 2)), _mm256_set1_epi32(_mm_extract_epi32(bs, 3))};
        const __m256 xd = _mm256_set1_ps(load_f32(xb));
        for (int v = 0; v < 2; ++v) {
          __m256i m = _mm256_setzero_si256();
          for (int t = 0; t < 4; ++t)
            m = _mm256_dpwssd_avx_epi32(m, kq_load32(pb + kMins + (t * kSlice + 8 * v) * 4), p[t]);
          const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kD) + 8 * v);
          const __m256 dmin = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kDmin) + 8 * v);
          facc[v][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v][a]), _mm256_mul_ps(d, xd), facc[v][a]);
          facc[v][a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, xd), facc[v][a]);
        }
      }
    }
    for (int a = 0; a < RA; ++a) {
      _mm256_storeu_ps(out16[a], facc[0][a]);
      _mm256_storeu_ps(out16[a] + 8, facc[1][a]);
    }
  }
};

struct Q6KVnniLanes {
  static constexpr int kSlice = 16, kActs = 3;
  static constexpr int kScale = kSlice * 4, kPairs = kScale + 16 * kSlice * 4, kQuants = kPairs + 8 * kSlice * 4;
  static constexpr int kSuperBytes = kQuants + 64 * kSlice * 4;

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 256;
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kSuperBytes;
      float* d = reinterpret_cast<float*>(pb);
      int32_t* scale = reinterpret_cast<int32_t*>(pb + kScale);
      uint32_t* pair = reinterpret_cast<uint32_t*>(pb + kPairs);
      uint32_t* quants = reinterpret_cast<uint32_t*>(pb + kQuants);
      alignas(32) uint32_t tmp[64];  // a row's 256 quants in element order
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {  // zero rows up to the slice
          d[r] = 0.0f;
          for (int s = 0; s < 16; ++s) scale[s * kSlice + r] = 0;
          for (int t = 0; t < 8; ++t) pair[t * kSlice + r] = 0;
          for (int grp = 0; grp < 64; ++grp) quants[grp * kSlice + r] = 0;
          continue;
        }
        const uint8_t* wb = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * kQ6_KBytes;
        d[r] = load_f16(wb + kQ6_KD);
        const int8_t* s8 = reinterpret_cast<const int8_t*>(wb + kQ6_KScales);
        for (int s = 0; s < 16; ++s) scale[s * kSlice + r] = s8[s];
        for (int t = 0; t < 8; ++t)
          pair[t * kSlice + r] = uint32_t(uint16_t(s8[2 * t])) | uint32_t(uint16_t(s8[2 * t + 1])) << 16;
        // Elements 128 half + 32 t + i: low 4 bits from ql (byte 64 half + 32 (t % 2) + i, the low
        // nibble for t < 2), high 2 bits from qh byte 32 half + i, bits 2t..2t+1.
        for (int half = 0; half < 2; ++half) {
          const __m256i qh = kq_load32(wb + kQ6_KQh + 32 * half);
          for (int t = 0; t < 4; ++t) {
            const __m256i ql = kq_load32(wb + 64 * half + 32 * (t % 2));
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
            c = _mm256_dpwssd_avx_epi32(c, kq_load32(pb + kPairs + (t * kSlice + 8 * v) * 4), _mm256_set1_epi32(two));
          }
          isum[v][a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
        }
      }
      const uint8_t* xq[RA];
      for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
      for (int s = 0; s < 16; ++s) kq_add_sub_block<RA, 4>(isum, pb + kQuants, pb + kScale + s * kSlice * 4, 4 * s, xq);
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

int64_t q4_K_scratch_floats(int64_t k) { return k / 256 * Q4KVnniLanes::kSuperBytes / 4 + 8; }
int64_t q6_K_scratch_floats(int64_t k) { return k / 256 * Q6KVnniLanes::kSuperBytes / 4 + 8; }

void gemm_q4_K(const GemmArgs& g) {
  if (g.n_act > kKQuantSmallBatch && g.scratch != nullptr) SliceDriver<Q4KVnniLanes>::run(g);
  else avx2::gemm_q4_K(g);
}
void gemm_q6_K(const GemmArgs& g) {
  if (g.n_act > kKQuantSmallBatch && g.scratch != nullptr) SliceDriver<Q6KVnniLanes>::run(g);
  else avx2::gemm_q6_K(g);
}

}  // namespace opal::cpu::avx2vnni
#endif  // x86
