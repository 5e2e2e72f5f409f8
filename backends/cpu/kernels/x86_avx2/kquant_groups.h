// The K-quant row-group decode kernels (kernels/repack.h, kLayoutKGroups8 and,
// for Q4_K since stop 24, kLayoutKGroups8Pairs, for Q6_K since stop 27,
// kLayoutQ6KGroups8Pairs): Q4_K and Q6_K weight rows in the int32 lanes, the activation
// broadcast, so one activation load serves 8 rows and no horizontal sum is left at the end. Included by
// kquant_groups_avx2.cpp (plain AVX2) and kquant_groups_avx2vnni.cpp (AVX-VNNI) inside an unnamed namespace;
// `Dot::pairs(acc, p, s)` adds the int16 pairs p times the rows' scale pairs s to the int32 lanes of acc (vpmaddwd +
// vpaddd, or one vpdpwssd): exact either way, so both give the same bits.
//
// Layout (per group and 256-element super-block, every piece [8 rows][4 bytes]
// so a 32-byte load holds one piece of all 8 rows, row i in int32 lane i):
//   Q4_K: d[8], dmin[8] (f16: one vcvtph2ps each), the 12 scale bytes as
//     three words, unpacked for all 8 rows at once on 32-bit lanes (the
//     6-bit scales 0-3 / 4-7 and mins 0-3 / 4-7, one byte each), then the
//     quants: piece 4t + j holds qs[32j + 4t .. +3] of each row, whose low
//     nibbles are elements 64j + 4t .. +3 (sub-block 2j) and high nibbles the
//     same 32 on (sub-block 2j + 1). The AVX2 kernels read Q4_K re-paired
//     (kLayoutKGroups8Pairs: each piece's nibbles transposed so one mask gives
//     two quants of each sub-block, q4_K_group_pairs below); AVX-512 reads
//     kLayoutQ4KGroups8Wide (since stop 39; kLayoutKGroups8 before).
//   Q6_K: d[8], the 16 int8 scales as four words, then for t in 0..7 and
//     half h three pieces p, q, r (the bytes of ql[64h + 4t], ql[64h + 32 + 4t],
//     qh[32h + 4t] re-encoded at load, stop 18: repack.h) that hold the four
//     vectors of 6-bit quants c = 0..3 (elements 128h + 32c + 4t): c = 0-2
//     one mask each (p, q, r & 63), c = 3 the top two bits of the three
//     (q6_K_unpack: 11 operations where the GGUF's nibble and 2-bit split took 17).
//     The AVX2 kernels read Q6_K re-paired (kLayoutQ6KGroups8Pairs: the four
//     vectors hold chunks 0, 1 and 2, 3 side by side, so a chunk pair takes one
//     vpmaddwd, q6_K_group_pairs below); AVX-512 reads kLayoutQ6KGroups8Wide.
// Per piece: vpmaddubsw of the 8 rows' unsigned quants with the activation's
// 4 int8 (vpbroadcastd) gives int16 pair sums, vpmaddwd by the rows'
// sub-block scale pair (s, s) exact int32 sums. The order of each row is the
// plain per-row decode kernels' (kquants_avx2.cpp Q45KKernel, Q6KKernel: 8
// float lanes per row, lane L holding the elements e with e % 32 in
// [4L, 4L + 4), which are the pieces t = L): per lane an exact int32 sum per
// super-block (Q4_K's mins as min_L * (bsum_2L + bsum_2L+1), Q6_K's -32 offset
// as -32 * (sc_2L * bsum_2L + sc_2L+1 * bsum_2L+1)), the same float FMAs into
// one accumulator per lane (8 rows each), and hsum8's tree over the 8 at the
// end. So a packed weight gives the plain layout's bits (and Q6_K keeps
// llama.cpp's, which the Q4_0 / Q4_K_M goldens' output matrices rely on).
// Q4_K in that order only under --batch-order llama (q4_K_group_pairs): since
// stop 26, where the lanes order is selected (auto, lanes: avx2::q4_K_super_block_exact)
// Q4_K decode and 2-3 rows run q4_K_group_pairs_lanes, the batches' order below
// (one exact int32 per row and super-block, one FMA and one FNMADD, one accumulator:
// 403 vector instructions a super-block and group where the 8-lane form, which
// spills its accumulators, takes 466), and the plain decode kernel follows it.
// Batches of 1-3 activation rows share each group's unpacked quants. Larger
// batches (stop 17: q4_K_group_pairs_lanes, q6_K_group_pairs_lanes, run_k_group_batch)
// read the groups in place too, in the plain batch kernels' lanes order (one
// exact int32 per row and super-block, one FMA; see there). Rows past the
// last whole group are plain: the plain gemm takes them. The layout's helpers
// (Q4KGroupScales, q4_K_group_mins, q6_K_group_offset, lane_bytes, the group
// walk run_k_groups) serve x86_avx512/kquant_groups_avx512.cpp too.
#pragma once
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace {
// The software prefetch of the batch kernels (kPrefetch), 8 KiB along the stream (stop 15: packed-decode*/avx2/
// q[46]_K and avx512, three interleaved passes at load 6.5-7: none 23-28 / 14-28 GB/s, 8 KiB 27.5-34 / 25-33; 16
// and 32 KiB no better than 8 in a noisier sweep). Decode (1-3 activation rows: run_q4_K_decode, run_q6_K_decode) takes
// it where opal::cpu::decode_prefetch() says so (matmul_kernels.h; by default every host but AMD's AVX-512 cores): on a
// Zen 4 host (EPYC, AVX-512) Llama-3.2-1B Q4_K_M tg64 at one thread ran 22.6-23.2 -> 28.9-30.3 t/s without it, 19.7
// -> 28.6 under --isa avx2, Qwen3-0.6B 45-46 -> 54-55, while the kernel bench there read the two forms within 5 %;
// batches of 8-24 rows lost 2-12 % without it (docs/perf/cpu-round2e.md, "Stop 37"); on a Zen 3 (AVX2 only, stop 42)
// decode ran 1.18-1.56x faster with it (Qwen3-0.6B / Llama-3.2-1B Q4_K_M token by token; docs/perf/cpu-round2g.md).
constexpr int kKGroupPrefetch = 8 * 1024;

constexpr int64_t kGroup = 8;
constexpr int64_t kQ4KGroupBytes = kGroup * kQ4_KBytes;  // 1152
constexpr int64_t kQ6KGroupBytes = kGroup * kQ6_KBytes;  // 1680
constexpr int kMaxActs = 4;  // the most activation rows one group call takes (avx2's decode: 3)

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// A vpshufb control that picks, in every int32 lane k, bytes 4k + b0..b3 of
// the lane (b < 0: zero), the same in both 128-bit halves.
inline __m256i lane_bytes(int b0, int b1, int b2, int b3) {
  auto one = [](int b) { return uint32_t(b < 0 ? 0x80 : b); };
  const uint32_t v = one(b0) | one(b1) << 8 | one(b2) << 16 | one(b3) << 24;
  return _mm256_add_epi8(_mm256_set1_epi32(int(v)), _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0,
                                                                      0x04040404, 0x08080808, 0x0C0C0C0C));
}

// The 6-bit scales and mins of a Q4_K group's super-block (its three scale
// words at gb + 32), 8 rows at once on 32-bit lanes: sc[0] holds the bytes of
// scales 0-3 of each row's lane, sc[1] scales 4-7, mn[0] / mn[1] the mins.
struct Q4KGroupScales {
  __m256i sc[2], mn[2];
  explicit Q4KGroupScales(const uint8_t* gb) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi32(0x3F3F3F3F), m4 = _mm256_set1_epi32(0x0F0F0F0F),
                  hi2 = _mm256_set1_epi32(0x30303030);
    const __m256i w0 = load32(gb + 32), w1 = load32(gb + 64), w2 = load32(gb + 96);
    sc[0] = _mm256_and_si256(w0, m6);
    sc[1] = _mm256_or_si256(_mm256_and_si256(w2, lo4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), hi2));
    mn[0] = _mm256_and_si256(w1, m6);
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi32(w1, 2), hi2));
  }
  // Scale s (0-7) of each row as the int16 pair (s, s).
  __m256i scale_pair(int s) const { return _mm256_shuffle_epi8(sc[s / 4], pick(s % 4)); }
  // Min l (0-7) of each row as the int16 pair (m, m).
  __m256i min_pair(int l) const { return _mm256_shuffle_epi8(mn[l / 4], pick(l % 4)); }
  // Mins (2u, 2u + 1), u = 0-3, of each row as one int16 pair.
  __m256i mins_2u(int u) const {
    return _mm256_shuffle_epi8(mn[u / 2], lane_bytes(2 * (u % 2), -1, 2 * (u % 2) + 1, -1));
  }
  // Scales (2j, 2j + 1), j = 0-3, of each row as one int16 pair (the re-paired layout's sub-block pair).
  __m256i scales_2j(int j) const {
    return _mm256_shuffle_epi8(sc[j / 2], lane_bytes(2 * (j % 2), -1, 2 * (j % 2) + 1, -1));
  }
  static __m256i pick(int b) { return lane_bytes(b, -1, b, -1); }
};

// Q4_K's mins against an activation row: sum_u (m_2u, m_2u+1) . (S_2u, S_2u+1),
// S_t = bsum_2t + bsum_2t+1 (the 32-element sums; int16: at most 32 * 128).
inline __m256i q4_K_group_mins(const __m256i mins2[4], const uint8_t* xb) {
  const __m128i s = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums)),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums + 16)));
  __m256i m = _mm256_madd_epi16(mins2[0], _mm256_set1_epi32(_mm_extract_epi32(s, 0)));
  m = _mm256_add_epi32(m, _mm256_madd_epi16(mins2[1], _mm256_set1_epi32(_mm_extract_epi32(s, 1))));
  m = _mm256_add_epi32(m, _mm256_madd_epi16(mins2[2], _mm256_set1_epi32(_mm_extract_epi32(s, 2))));
  return _mm256_add_epi32(m, _mm256_madd_epi16(mins2[3], _mm256_set1_epi32(_mm_extract_epi32(s, 3))));
}

// A group super-block's bytes kKGroupPrefetch ahead, requested into L1 (batch kernels).
inline void prefetch_group(const uint8_t* gb, int bytes) {
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(gb + kKGroupPrefetch + o), _MM_HINT_T0);
}

// The end of a Q4_K super-block in the lanes order, for RA activation rows:
// acc = fma(float(isum), d * d_x, acc); acc = fnmadd(float(mins . sums), dmin * d_x, acc).
template <int RA>
inline void q4_K_group_finish(const uint8_t* gb, const Q4KGroupScales& scm, const uint8_t* const* xb,
                              const __m256i* isum, __m256* acc) {
  const __m256i mins2[4] = {scm.mins_2u(0), scm.mins_2u(1), scm.mins_2u(2), scm.mins_2u(3)};
  const __m256 d = load_f16x8(gb), dmin = load_f16x8(gb + 16);
  for (int a = 0; a < RA; ++a) {
    const __m256 xd = _mm256_set1_ps(load_f32(xb[a]));
    const __m256 m = _mm256_cvtepi32_ps(q4_K_group_mins(mins2, xb[a]));
    acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(d, xd), acc[a]);
    acc[a] = _mm256_fnmadd_ps(m, _mm256_mul_ps(dmin, xd), acc[a]);
  }
}

// A Q6_K group's piece triple at pq (p, q, r: repack.h) as the four vectors of
// 6-bit quants (8 rows x 4 bytes; which quants: repack.h) q0-q3: q0-q2 = p, q, r & 63;
// q3 = p >> 6 | (q >> 6) << 2 | (r >> 6) << 4, from the top bits (& 0xC0,
// so the 16-bit shifts bring nothing in from the neighbouring byte). One
// mask register (hi2 = 0xC0 in every byte); each piece loaded once (a
// memory operand of the masks would load it twice).
inline void q6_K_unpack(const uint8_t* pq, __m256i hi2, __m256i q[4]) {
  const __m256i p = in_register(load32(pq)), r = in_register(load32(pq + 32)), s = in_register(load32(pq + 64));
  q[0] = _mm256_andnot_si256(hi2, p);
  q[1] = _mm256_andnot_si256(hi2, r);
  q[2] = _mm256_andnot_si256(hi2, s);
  q[3] = _mm256_or_si256(
      _mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(p, hi2), 6), _mm256_srli_epi16(_mm256_and_si256(r, hi2), 4)),
      _mm256_srli_epi16(_mm256_and_si256(s, hi2), 2));
}

// The 16 int8 scales of a Q6_K group's super-block (its four scale words sw)
// as int16 pairs (s, s) of 8 rows: each word's bytes sign-extended once (even
// bytes by a shift up and down, odd bytes by a shift down), then one vpshufb
// per pair.
inline void q6_K_scale_pairs(const __m256i sw[4], __m256i s16[16]) {
  const __m256i lo = lane_bytes(0, 1, 0, 1), hi = lane_bytes(2, 3, 2, 3);
  for (int w = 0; w < 4; ++w) {
    const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(sw[w], 8), 8), odd = _mm256_srai_epi16(sw[w], 8);
    s16[4 * w] = _mm256_shuffle_epi8(even, lo);
    s16[4 * w + 1] = _mm256_shuffle_epi8(odd, lo);
    s16[4 * w + 2] = _mm256_shuffle_epi8(even, hi);
    s16[4 * w + 3] = _mm256_shuffle_epi8(odd, hi);
  }
}

// Q6_K's -32 offset of a group's super-block (its four scale words sw)
// against an activation row: -32 * sum_t (sc_2t, sc_2t+1) . (bsum_2t, bsum_2t+1),
// the pairs sign-extended from the high byte.
inline __m256i q6_K_group_offset(const __m256i sw[4], const uint8_t* xb) {
  __m256i c = _mm256_setzero_si256();
  for (int t = 0; t < 8; ++t) {
    const __m256i sp = _mm256_srai_epi16(
        _mm256_shuffle_epi8(sw[t / 2], t % 2 ? lane_bytes(-1, 2, -1, 3) : lane_bytes(-1, 0, -1, 1)), 8);
    c = _mm256_add_epi32(c, _mm256_madd_epi16(sp, bcast4(xb + kQ8_KBsums + 4 * t)));
  }
  return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
}

// llama.cpp's (and the plain decode kernels') order keeps 8 float lanes per
// row: lane L of a super-block's int32 sum holds the elements e with
// e % 32 in [4L, 4L + 4), which are exactly the pieces t = L of the layout.
// So the kernels below sum, per L, the pieces of lane L into an exact int32
// (8 rows), fold it into float accumulator L with the plain kernel's float
// steps, and end with hsum8's tree over the 8 accumulators: each row's bits
// are the plain kernel's.
template <int RA>
void hsum_lanes(__m256 (*acc)[8], float* const* out) {
  for (int a = 0; a < RA; ++a) {
    const __m256 s0 = _mm256_add_ps(acc[a][0], acc[a][4]), s1 = _mm256_add_ps(acc[a][1], acc[a][5]);
    const __m256 s2 = _mm256_add_ps(acc[a][2], acc[a][6]), s3 = _mm256_add_ps(acc[a][3], acc[a][7]);
    _mm256_storeu_ps(out[a], _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
  }
}

// The re-paired Q4_K layout (kLayoutKGroups8Pairs, repack.h; stop 24). A piece's
// bytes hold, for lane l and sub-block pair j, nibbles n0 = lo0 | lo2 << 4,
// n1 = lo1 | lo3 << 4, n2 = hi0 | hi2 << 4, n3 = hi1 | hi3 << 4 (lo_b: element
// 64j + 4l + b, sub-block 2j; hi_b: the same 32 on, sub-block 2j + 1). So the
// low nibbles of a row's int32 lane are (lo0, lo1, hi0, hi1) and the high
// nibbles (lo2, lo3, hi2, hi3): against the activation's bytes in the same
// order (pair_q8_K_row), vpmaddubsw gives an int16 pair (sub-block 2j, 2j + 1)
// from each mask, the two add in int16 (each half a 4-element sum, at most
// 4 * 15 * 128 = 7680), and one vpmaddwd by the scale pair (s_2j, s_2j+1) gives
// s_2j * S_2j + s_2j+1 * S_2j+1 exactly: 3 multiplies per 32 weight bytes where
// kLayoutKGroups8 takes 4 (a vpmaddwd per sub-block), and one add fewer. The
// int32 sums are the same integers, so the bits are kLayoutKGroups8's and the
// plain kernels'.

// An activation row's Q8_K super-blocks with the quants in the re-paired
// order: for j = 0..3 and lane l = 0..7, bytes 64j + 8l + 0..7 are
// x[64j + 4l + 0, 1], x[64j + 32 + 4l + 0, 1], x[64j + 4l + 2, 3],
// x[64j + 32 + 4l + 2, 3] (d and bsums as they were). Per j: the int16 words of
// the two sub-blocks interleaved (vpunpck{l,h}wd within the 128-bit halves,
// then the halves put in order).
inline void pair_q8_K_row(const uint8_t* x, int64_t nb, uint8_t* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* xb = x + b * kQ8_KBytes;
    uint8_t* db = dst + b * kQ8_KBytes;
    std::memcpy(db, xb, kQ8_KQs);
    std::memcpy(db + kQ8_KBsums, xb + kQ8_KBsums, kQ8_KBytes - kQ8_KBsums);
    for (int j = 0; j < 4; ++j) {
      const __m256i lo = load32(xb + kQ8_KQs + 64 * j), hi = load32(xb + kQ8_KQs + 64 * j + 32);
      const __m256i a = _mm256_unpacklo_epi16(lo, hi),
                    c = _mm256_unpackhi_epi16(lo, hi);  // lanes 0, 1 | 4, 5; 2, 3 | 6, 7
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(db + kQ8_KQs + 64 * j), _mm256_permute2x128_si256(a, c, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(db + kQ8_KQs + 64 * j + 32),
                          _mm256_permute2x128_si256(a, c, 0x31));
    }
  }
}

// One group of 8 re-paired Q4_K rows against RA paired activation rows: out[a][0..7].
// Per super-block and lane L (Q45KKernel in kquants_avx2.cpp):
//   isum_L = sum_j (s_2j, s_2j+1) . (S_2j, S_2j+1)(j, L), m_L = min_L * (bsum_2L + bsum_2L+1)
//   acc_L = fma(isum_L, d * d_x, acc_L); acc_L = fnmadd(m_L, dmin * d_x, acc_L)
// (isum_L exact in any order: one chain of 4 per lane, the 8 lanes independent;
// kLayoutKGroups8's kernel, stop 18, ran two chains of 4, the low and high nibbles).
template <class Dot, int RA, bool kPrefetch>
void q4_K_group_pairs(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  __m256 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ4KGroupBytes);
    const Q4KGroupScales scm(gb);
    const __m256i s16[4] = {scm.scales_2j(0), scm.scales_2j(1), scm.scales_2j(2), scm.scales_2j(3)};
    const __m256 d = load_f16x8(gb), dmin = load_f16x8(gb + 16);
    const uint8_t* xb[RA];
    __m256 dd[RA], dm[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      const __m256 xd = _mm256_set1_ps(load_f32(xb[a]));
      dd[a] = _mm256_mul_ps(d, xd);
      dm[a] = _mm256_mul_ps(dmin, xd);
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      __m256i isum[RA];
      for (int a = 0; a < RA; ++a) isum[a] = _mm256_setzero_si256();  // set before j = 0 overwrites it
      for (int j = 0; j < 4; ++j) {
        const __m256i v = in_register(load32(gb + 128 + (4 * l + j) * 32));
        const __m256i q0 = _mm256_and_si256(v, lo4), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 64 * j + 8 * l;
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4(xq)), _mm256_maddubs_epi16(q1, bcast4(xq + 4)));
          isum[a] = j == 0 ? _mm256_madd_epi16(p, s16[0]) : Dot::pairs(isum[a], p, s16[j]);
        }
      }
      const __m256i ml = scm.min_pair(l);
      for (int a = 0; a < RA; ++a) {
        const __m256 m = _mm256_cvtepi32_ps(_mm256_madd_epi16(ml, bcast4(xb[a] + kQ8_KBsums + 4 * l)));
        acc[a][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), dd[a], acc[a][l]);
        acc[a][l] = _mm256_fnmadd_ps(m, dm[a], acc[a][l]);
      }
    }
  }
  hsum_lanes<RA>(acc, out);
}

// Batches in the plain batch kernels' lanes order (kquants_avx2.cpp Q4KRowsInLanes,
// kquants_avx2vnni.cpp Q4KVnniLanes, kquants_avx512.cpp Q4KRowsInLanes: the same
// bits on every ISA), read from the re-paired groups in place (stop 17 on
// kLayoutKGroups8 as q4_K_group_lanes, stop 24 re-paired): per row and
// super-block one exact int32 sum isum = sum_s sc_s * (sub-block s . x) and
// msum = sum_s min_s * (bsum_2s + bsum_2s+1), then
//   acc = fma(float(isum), d * d_x, acc); acc = fnmadd(float(msum), dmin * d_x, acc)
// and acc is the result (no horizontal sum). Per sub-block pair j, four lanes' pieces
// add in int16 (each int16 then sums 4 lanes x 4 elements of one sub-block: at
// most 16 * 15 * 128 = 30720), then one vpmaddwd by (s_2j, s_2j+1); twice per j.
template <class Dot, int RA, bool kPrefetch>
void q4_K_group_pairs_lanes(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ4KGroupBytes);
    const Q4KGroupScales scm(gb);
    const uint8_t* xb[RA];
    __m256i isum[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      isum[a] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i sp = scm.scales_2j(j);
      for (int l0 = 0; l0 < 8; l0 += 4) {
        __m256i p[RA];
        for (int a = 0; a < RA; ++a) p[a] = _mm256_setzero_si256();  // set before l = l0 overwrites it
        for (int l = l0; l < l0 + 4; ++l) {
          const __m256i v = in_register(load32(gb + 128 + (4 * l + j) * 32));
          const __m256i q0 = _mm256_and_si256(v, lo4), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
          for (int a = 0; a < RA; ++a) {
            const uint8_t* xq = xb[a] + kQ8_KQs + 64 * j + 8 * l;
            const __m256i pl =
                _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4(xq)), _mm256_maddubs_epi16(q1, bcast4(xq + 4)));
            p[a] = l == l0 ? pl : in_register(_mm256_add_epi16(p[a], pl));
          }
        }
        for (int a = 0; a < RA; ++a) isum[a] = Dot::pairs(isum[a], p[a], sp);
      }
    }
    q4_K_group_finish<RA>(gb, scm, xb, isum, acc);
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// The re-paired Q6_K layout (kLayoutQ6KGroups8Pairs, repack.h; stop 27). A
// piece triple of lane l and half h unpacks (q6_K_unpack) to four vectors whose
// row lanes hold V0 = (q[0][0], q[0][1], q[1][0], q[1][1]), V1 = (q[0][2], q[0][3],
// q[1][2], q[1][3]) and V2, V3 the same for chunks 2, 3 (q[c][b]: element
// 128h + 32c + 4l + b, sub-block s = 8h + 2c + l / 4). Chunks 2u and 2u + 1 are
// elements 64j + 4l + b and 64j + 32 + 4l + b, j = 2h + u: pair_q8_K_row's
// order, the one the re-paired Q4_K reads. So vpmaddubsw of V_2u and V_2u+1
// with the activation's bytes 64j + 8l .. +3 and +4 .. +7 gives int16 pairs
// (chunk 2u, chunk 2u + 1) that add in int16 (each word a 4-element sum, at
// most 4 * 63 * 128 = 32256), and one vpmaddwd by the scale pair (s, s + 2)
// gives both chunks' scaled sums: 6 multiplies per piece triple where
// kLayoutKGroups8 takes 8. The scale pairs (sc_4j+u, sc_4j+u+2) are word j's
// even (u = 0: l < 4) or odd (u = 1) bytes sign-extended: three shifts a word
// and no shuffle. The int32 sums are the same integers as kLayoutKGroups8's,
// so the bits are too.

// Scale pairs (sc_4j+u, sc_4j+u+2), j = 0..3, of a Q6_K group's super-block (its
// four scale words sw) as int16 pairs of 8 rows: u = 0 the even bytes, 1 the odd.
inline void q6_K_scale_pairs_2apart(const __m256i sw[4], int u, __m256i sp[4]) {
  for (int j = 0; j < 4; ++j)
    sp[j] = u == 0 ? _mm256_srai_epi16(_mm256_slli_epi16(sw[j], 8), 8) : _mm256_srai_epi16(sw[j], 8);
}

// A re-paired piece triple's chunk pair u (its unpacked vectors q[2u], q[2u + 1])
// against the paired activation bytes xq (64j + 8l .. +7): the two vpmaddubsw
// added in int16, the (chunk 2u, chunk 2u + 1) word pairs for one vpmaddwd by
// the scale pair (s, s + 2).
inline __m256i q6_K_pair_sums(const __m256i q[4], int u, const uint8_t* xq) {
  const __m256i lo = _mm256_maddubs_epi16(q[2 * u], bcast4(xq));
  const __m256i hi = _mm256_maddubs_epi16(q[2 * u + 1], bcast4(xq + 4));
  return _mm256_add_epi16(lo, hi);
}

// One group of 8 re-paired Q6_K rows against RA paired activation rows: out[a][0..7].
// Per super-block and lane L (Q6KKernel in kquants_avx2.cpp, llama.cpp's order):
//   isum_L = sum_{h,c} sc_s * q6(h, c, L) . x - 32 * (sc_2L * bsum_2L + sc_2L+1 * bsum_2L+1), s = 8h + 2c + L / 4
//   acc_L = fma(isum_L, d * d_x, acc_L)
// The int32 sum is exact in any order: two chains (chunk pair u = 0, 1) so that
// avx2-vnni's vpdpwssd does not wait on its own latency, the offset as one
// vpmaddwd of the pair (32 sc, 32 sc') (the scale byte moved to the high byte,
// shifted down by 3) subtracted at the end.
template <class Dot, int RA, bool kPrefetch>
void q6_K_group_pairs(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i pair[2] = {lane_bytes(-1, 0, -1, 1), lane_bytes(-1, 2, -1, 3)};  // (sc_2L, sc_2L+1) high bytes
  const __m256i hi2 = _mm256_set1_epi8(char(0xC0));
  __m256 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ6KGroupBytes);
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    const __m256 d = load_f16x8(gb);
    const uint8_t* xb[RA];
    __m256 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      dd[a] = _mm256_mul_ps(d, _mm256_set1_ps(load_f32(xb[a])));
    }
    __m256i sp[4];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      if (l % 4 == 0) q6_K_scale_pairs_2apart(sw, l / 4, sp);
      __m256i isum[RA][2];  // two chains of the exact int32 sum (chunk pair u = 0, 1)
      for (int a = 0; a < RA; ++a) isum[a][0] = isum[a][1] = _mm256_setzero_si256();  // set before h = 0 overwrites
      for (int h = 0; h < 2; ++h) {
        __m256i q[4];
        q6_K_unpack(gb + 144 + (2 * l + h) * 3 * 32, hi2, q);
        for (int u = 0; u < 2; ++u) {
          const int j = 2 * h + u;
          for (int a = 0; a < RA; ++a) {
            const __m256i p = q6_K_pair_sums(q, u, xb[a] + kQ8_KQs + 64 * j + 8 * l);
            __m256i& s = isum[a][u];
            s = h == 0 ? _mm256_madd_epi16(p, sp[j]) : Dot::pairs(s, p, sp[j]);
          }
        }
      }
      const __m256i sp32 = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[l / 2], pair[l % 2]), 3);
      for (int a = 0; a < RA; ++a) {
        const __m256i off = _mm256_madd_epi16(sp32, bcast4(xb[a] + kQ8_KBsums + 4 * l));
        const __m256i sum = _mm256_sub_epi32(_mm256_add_epi32(isum[a][0], isum[a][1]), off);
        acc[a][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), dd[a], acc[a][l]);
      }
    }
  }
  hsum_lanes<RA>(acc, out);
}

// Q6_K batches in the lanes order (kquants_avx2.cpp Q6KRowsInLanes and its
// avx2-vnni / avx512 forms) on the re-paired groups, against paired activation
// rows: isum = -32 * sum_s sc_s * bsum_s + sum_s sc_s * (sub-block s . x), exact;
// acc = fma(float(isum), d * d_x, acc). Per piece triple and chunk pair, as
// q6_K_group_pairs: two vpmaddubsw added in int16, one vpmaddwd by (s, s + 2).
template <class Dot, int RA, bool kPrefetch>
void q6_K_group_pairs_lanes(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i hi2 = _mm256_set1_epi8(char(0xC0));
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ6KGroupBytes);
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    const uint8_t* xb[RA];
    __m256i isum[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      isum[a] = q6_K_group_offset(sw, xb[a]);
    }
    for (int u8 = 0; u8 < 2; ++u8) {  // lanes 4 u8 .. 4 u8 + 3: the even (0) or odd (1) scale bytes
      __m256i sp[4];
      q6_K_scale_pairs_2apart(sw, u8, sp);
      for (int h = 0; h < 2; ++h)
        for (int l = 4 * u8; l < 4 * u8 + 4; ++l) {
          __m256i q[4];
          q6_K_unpack(gb + 144 + (2 * l + h) * 3 * 32, hi2, q);
          for (int u = 0; u < 2; ++u) {
            const int j = 2 * h + u;
            for (int a = 0; a < RA; ++a) {
              isum[a] = Dot::pairs(isum[a], q6_K_pair_sums(q, u, xb[a] + kQ8_KQs + 64 * j + 8 * l), sp[j]);
            }
          }
        }
    }
    const __m256 d = load_f16x8(gb);
    for (int a = 0; a < RA; ++a)
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(d, _mm256_set1_ps(load_f32(xb[a]))), acc[a]);
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, float* const*);

// The thread's groups against the activation rows, up to max_acts (<= kMaxActs)
// at once through group[ra - 1] (sharing each group's quants; a group of
// 1152-1680 bytes per super-block stays in L1 between the calls of a batch);
// then the plain rows after the last whole group through the plain gemm.
// paired_acts (the re-paired Q4_K and Q6_K kernels): the groups meet the activation rows
// through pair_q8_K_row's copies (made once a call, in a thread-local buffer);
// the plain rows after the last group read the rows as they are.
inline void run_k_groups(const opal::cpu::GemmArgs& g, const GroupFn* group, int max_acts,
                         void (*plain)(const opal::cpu::GemmArgs&), bool paired_acts = false) {
  if (g.row_begin % kGroup != 0)
    opal::fail("K-quant row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  if (g.k % 256 != 0) opal::fail("K-quant row-group gemm: rows of {} elements (not whole super-blocks)", g.k);
  const int64_t nb = g.k / 256;
  const int64_t full = g.n_rows / kGroup * kGroup;
  const int64_t end = g.row_end < full ? g.row_end : full;
  const uint8_t* act = g.act;
  uint64_t act_row_bytes = g.act_row_bytes;
  if (paired_acts && end > g.row_begin) {
    thread_local std::vector<uint8_t> paired;
    act_row_bytes = uint64_t(nb) * kQ8_KBytes;
    paired.resize(size_t(uint64_t(g.n_act) * act_row_bytes));
    for (int64_t a = 0; a < g.n_act; ++a)
      pair_q8_K_row(g.act + uint64_t(a) * g.act_row_bytes, nb, paired.data() + uint64_t(a) * act_row_bytes);
    act = paired.data();
  }
  for (int64_t r = g.row_begin; r < end; r += kGroup) {
    const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
    for (int64_t a0 = 0; a0 < g.n_act; a0 += max_acts) {
      const int ra = int(g.n_act - a0 < max_acts ? g.n_act - a0 : max_acts);
      const uint8_t* x[kMaxActs];
      float* out[kMaxActs];
      for (int a = 0; a < ra; ++a) {
        x[a] = act + uint64_t(a0 + a) * act_row_bytes;
        out[a] = g.out + (a0 + a) * g.out_stride + r;
      }
      group[ra - 1](grp, nb, x, out);
    }
  }
  if (g.row_end > end) {
    opal::cpu::GemmArgs rest = g;
    rest.row_begin = end > g.row_begin ? end : g.row_begin;
    rest.layout = 0;
    plain(rest);
  }
}

// Decode: the Q4_K (super-block-exact or llama.cpp's order) and Q6_K group kernels of 1-3 activation rows, with
// and without the software prefetch, chosen per call by opal::cpu::decode_prefetch().
constexpr int kDecodeActs = 3;  // packed_max_act (table.cpp): the plain kernels' per-row batch sizes
template <class Dot, bool kPrefetch>
struct KDecodeKernels {
  static constexpr GroupFn q4_K[kDecodeActs] = {
      q4_K_group_pairs<Dot, 1, kPrefetch>, q4_K_group_pairs<Dot, 2, kPrefetch>, q4_K_group_pairs<Dot, 3, kPrefetch>};
  static constexpr GroupFn q4_K_exact[kDecodeActs] = {q4_K_group_pairs_lanes<Dot, 1, kPrefetch>,
                                                      q4_K_group_pairs_lanes<Dot, 2, kPrefetch>,
                                                      q4_K_group_pairs_lanes<Dot, 3, kPrefetch>};
  static constexpr GroupFn q6_K[kDecodeActs] = {
      q6_K_group_pairs<Dot, 1, kPrefetch>, q6_K_group_pairs<Dot, 2, kPrefetch>, q6_K_group_pairs<Dot, 3, kPrefetch>};
};

template <class Dot>
void run_q4_K_decode(const opal::cpu::GemmArgs& g, bool super_block_exact, void (*plain)(const opal::cpu::GemmArgs&)) {
  using On = KDecodeKernels<Dot, true>;
  using Off = KDecodeKernels<Dot, false>;
  const bool p = opal::cpu::decode_prefetch();
  const GroupFn* k = super_block_exact ? (p ? On::q4_K_exact : Off::q4_K_exact) : (p ? On::q4_K : Off::q4_K);
  run_k_groups(g, k, kDecodeActs, plain, true);
}

template <class Dot>
void run_q6_K_decode(const opal::cpu::GemmArgs& g, void (*plain)(const opal::cpu::GemmArgs&)) {
  run_k_groups(g, opal::cpu::decode_prefetch() ? KDecodeKernels<Dot, true>::q6_K : KDecodeKernels<Dot, false>::q6_K,
               kDecodeActs, plain, true);
}

// Batches above packed_max_act (MatmulKernels::gemm_packed_batch) in the lanes
// order, where the plain gemm takes it too (a scratch: its lanes kernels need
// one); false, writing nothing, otherwise (ops/matmul.cpp then unpacks).
inline bool run_k_group_batch(const opal::cpu::GemmArgs& g, const GroupFn* lanes,
                              void (*plain)(const opal::cpu::GemmArgs&), bool paired_acts = false) {
  if (g.scratch == nullptr) return false;
  run_k_groups(g, lanes, kMaxActs, plain, paired_acts);
  return true;
}

}  // namespace
