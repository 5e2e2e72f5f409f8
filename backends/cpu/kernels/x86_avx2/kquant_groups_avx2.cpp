// Decode of Q4_K and Q6_K weights repacked at load into groups of 8 rows
// (kernels/repack.h, kLayoutKGroups8), with AVX2: weight rows in the int32
// lanes, the activation broadcast, so one activation load serves 8 rows and
// no horizontal sum is left at the end.
//
// Layout (per group and 256-element super-block, every piece [8 rows][4 bytes]
// so a 32-byte load holds one piece of all 8 rows, row i in int32 lane i):
//   Q4_K: d[8], dmin[8] (f16: one vcvtph2ps each), the 12 scale bytes as
//     three words, unpacked for all 8 rows at once on 32-bit lanes (the
//     6-bit scales 0-3 / 4-7 and mins 0-3 / 4-7, one byte each), then the
//     quants: piece 8j + t holds qs[32j + 4t .. +3] of each row, whose low
//     nibbles are elements 64j + 4t .. +3 (sub-block 2j) and high nibbles the
//     same 32 on (sub-block 2j + 1).
//   Q6_K: d[8], the 16 int8 scales as four words, then per half h and
//     t in 0..7 the pieces ql[64h + 4t], ql[64h + 32 + 4t], qh[32h + 4t],
//     from which four vectors of 6-bit quants (elements 128h + 32c + 4t, c in
//     0..3) are made with shifts and masks.
// Per group of 4 elements: vpmaddubsw of the 8 rows' unsigned quants with the
// activation's 4 int8 (vpbroadcastd) gives int16 pair sums; Q4_K adds a
// sub-block's 8 groups in int16 (at most 8 * 2 * 15 * 128 = 30720), Q6_K two
// groups (2 * 2 * 63 * 128 = 32256); vpmaddwd by the rows' scale pair (s, s)
// makes them exact scaled int32 sums, added over the super-block. Q4_K's
// mins meet the activation's 32-element sums (pairs of bsums) by vpmaddwd of
// (m_2t, m_2t+1) pairs; Q6_K's -32 offset starts the sum as
// -32 * sum_s sc_s * bsum_s. Then per super-block, per row:
//   Q4_K: acc = fma(isum, d * d_x, acc); acc = fnmadd(mins, dmin * d_x, acc)
//   Q6_K: acc = fma(isum, d * d_x, acc)
// which are the float steps of the rows-in-lanes batch kernels
// (kquants_avx2.cpp Q4KRowsInLanes, Q6KRowsInLanes) on the same exact int32
// sums: a row's decode gives the batch kernels' bits (not the plain per-row
// decode kernels', which keep 8 float lanes per row: within the K-quant
// tolerance of those). Batches of 1-3 activation rows share each group's
// unpacked quants. Rows past the last whole group are plain: the plain gemm
// takes them.
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2 {
namespace {

constexpr int64_t kGroup = 8;
constexpr int64_t kQ4KGroupBytes = kGroup * kQ4_KBytes;  // 1152
constexpr int64_t kQ6KGroupBytes = kGroup * kQ6_KBytes;  // 1680
constexpr int kMaxActs = 3;

__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
__m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// A vpshufb control that picks, in every int32 lane k, bytes 4k + b0..b3 of
// the lane (b < 0: zero), the same in both 128-bit halves.
__m256i lane_bytes(int b0, int b1, int b2, int b3) {
  auto one = [](int b) { return uint32_t(b < 0 ? 0x80 : b); };
  const uint32_t v = one(b0) | one(b1) << 8 | one(b2) << 16 | one(b3) << 24;
  return _mm256_add_epi8(_mm256_set1_epi32(int(v)), _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0,
                                                                      0x04040404, 0x08080808, 0x0C0C0C0C));
}

// One group of 8 Q4_K rows against RA Q8_K activation rows: out[a][0..7].
template <int RA>
void q4_K_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi32(0x3F3F3F3F), m4 = _mm256_set1_epi32(0x0F0F0F0F),
                hi2 = _mm256_set1_epi32(0x30303030);
  const __m256i pick[4] = {lane_bytes(0, -1, 0, -1), lane_bytes(1, -1, 1, -1), lane_bytes(2, -1, 2, -1),
                           lane_bytes(3, -1, 3, -1)};                            // scale s as the int16 pair (s, s)
  const __m256i pair[2] = {lane_bytes(0, -1, 1, -1), lane_bytes(2, -1, 3, -1)};  // (m_2t, m_2t+1)
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    const __m256i w0 = load32(gb + 32), w1 = load32(gb + 64), w2 = load32(gb + 96);
    const __m256i sc[2] = {_mm256_and_si256(w0, m6),
                           _mm256_or_si256(_mm256_and_si256(w2, lo4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), hi2))};
    const __m256i mn[2] = {_mm256_and_si256(w1, m6), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                                                                     _mm256_and_si256(_mm256_srli_epi32(w1, 2), hi2))};
    const uint8_t* xq[RA];
    for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
    __m256i isum[RA];
    for (int a = 0; a < RA; ++a) isum[a] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const uint8_t* pq = gb + 128 + 8 * j * 32;
      __m256i lo[RA], hi[RA];
      for (int t = 0; t < 8; ++t) {
        const __m256i v = load32(pq + 32 * t);
        const __m256i ql = _mm256_and_si256(v, lo4), qh = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
        for (int a = 0; a < RA; ++a) {
          const __m256i pl = _mm256_maddubs_epi16(ql, bcast4(xq[a] + 64 * j + 4 * t));
          const __m256i ph = _mm256_maddubs_epi16(qh, bcast4(xq[a] + 64 * j + 32 + 4 * t));
          lo[a] = t == 0 ? pl : _mm256_add_epi16(lo[a], pl);
          hi[a] = t == 0 ? ph : _mm256_add_epi16(hi[a], ph);
        }
      }
      const __m256i slo = _mm256_shuffle_epi8(sc[j / 2], pick[(2 * j) % 4]);
      const __m256i shi = _mm256_shuffle_epi8(sc[j / 2], pick[(2 * j + 1) % 4]);
      for (int a = 0; a < RA; ++a)
        isum[a] =
            _mm256_add_epi32(isum[a], _mm256_add_epi32(_mm256_madd_epi16(lo[a], slo), _mm256_madd_epi16(hi[a], shi)));
    }
    __m256i mp[4];
    for (int t = 0; t < 4; ++t) mp[t] = _mm256_shuffle_epi8(mn[t / 2], pair[t % 2]);
    const __m256 d = load_f16x8(gb), dmin = load_f16x8(gb + 16);
    for (int a = 0; a < RA; ++a) {
      const uint8_t* xb = x[a] + b * kQ8_KBytes;
      // the 8 sub-blocks' activation sums (pairs of bsums), as int16 pairs (2t, 2t + 1)
      const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + kQ8_KBsums + 16)));
      __m256i m = _mm256_madd_epi16(mp[0], _mm256_set1_epi32(_mm_extract_epi32(bs, 0)));
      m = _mm256_add_epi32(m, _mm256_madd_epi16(mp[1], _mm256_set1_epi32(_mm_extract_epi32(bs, 1))));
      m = _mm256_add_epi32(m, _mm256_madd_epi16(mp[2], _mm256_set1_epi32(_mm_extract_epi32(bs, 2))));
      m = _mm256_add_epi32(m, _mm256_madd_epi16(mp[3], _mm256_set1_epi32(_mm_extract_epi32(bs, 3))));
      const __m256 xd = _mm256_set1_ps(load_f32(xb));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(d, xd), acc[a]);
      acc[a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, xd), acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// One group of 8 Q6_K rows against RA Q8_K activation rows: out[a][0..7].
template <int RA>
void q6_K_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
  // scale s (byte s % 4 of word s / 4) as the int16 pair (s, s), sign-extended by the shift right
  const __m256i pick[4] = {lane_bytes(-1, 0, -1, 0), lane_bytes(-1, 1, -1, 1), lane_bytes(-1, 2, -1, 2),
                           lane_bytes(-1, 3, -1, 3)};
  const __m256i pair[2] = {lane_bytes(-1, 0, -1, 1), lane_bytes(-1, 2, -1, 3)};  // (sc_2t, sc_2t+1)
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    const uint8_t* xq[RA];
    for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_KBytes + kQ8_KQs;
    __m256i isum[RA];
    {
      __m256i sp[8];
      for (int t = 0; t < 8; ++t) sp[t] = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[t / 2], pair[t % 2]), 8);
      for (int a = 0; a < RA; ++a) {  // -32 * sum_s sc_s * bsum_s
        const uint8_t* bs = x[a] + b * kQ8_KBytes + kQ8_KBsums;
        __m256i c = _mm256_madd_epi16(sp[0], bcast4(bs));
        for (int t = 1; t < 8; ++t) c = _mm256_add_epi32(c, _mm256_madd_epi16(sp[t], bcast4(bs + 4 * t)));
        isum[a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < 4; ++u) {  // t = 2u, 2u + 1: sub-blocks 8h + 2c + u / 2
        __m256i s16[4][RA];
        for (int v = 0; v < 2; ++v) {
          const int t = 2 * u + v;
          const uint8_t* pq = gb + 144 + (8 * h + t) * 3 * 32;
          const __m256i A = load32(pq), B = load32(pq + 32), C = load32(pq + 64);
          const __m256i q[4] = {
              _mm256_or_si256(_mm256_and_si256(A, lo4), _mm256_and_si256(_mm256_slli_epi16(C, 4), hi2)),
              _mm256_or_si256(_mm256_and_si256(B, lo4), _mm256_and_si256(_mm256_slli_epi16(C, 2), hi2)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), lo4), _mm256_and_si256(C, hi2)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), lo4),
                              _mm256_and_si256(_mm256_srli_epi16(C, 2), hi2))};
          for (int c = 0; c < 4; ++c)
            for (int a = 0; a < RA; ++a) {
              const __m256i p = _mm256_maddubs_epi16(q[c], bcast4(xq[a] + 128 * h + 32 * c + 4 * t));
              s16[c][a] = v == 0 ? p : _mm256_add_epi16(s16[c][a], p);
            }
        }
        for (int c = 0; c < 4; ++c) {
          const int s = 8 * h + 2 * c + u / 2;
          const __m256i sv = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[s / 4], pick[s % 4]), 8);
          for (int a = 0; a < RA; ++a) isum[a] = _mm256_add_epi32(isum[a], _mm256_madd_epi16(s16[c][a], sv));
        }
      }
    const __m256 d = load_f16x8(gb);
    for (int a = 0; a < RA; ++a) {
      const __m256 xd = _mm256_set1_ps(load_f32(x[a] + b * kQ8_KBytes));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(d, xd), acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, float* const*);

// The thread's groups against the activation rows (up to kMaxActs at once,
// sharing each group's quants); then the plain rows after the last whole
// group through the plain gemm.
void run_k_groups(const GemmArgs& g, const GroupFn* group, void (*plain)(const GemmArgs&)) {
  if (g.row_begin % kGroup != 0)
    fail("K-quant row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  if (g.k % 256 != 0) fail("K-quant row-group gemm: rows of {} elements (not whole super-blocks)", g.k);
  const int64_t nb = g.k / 256;
  const int64_t full = g.n_rows / kGroup * kGroup;
  const int64_t end = g.row_end < full ? g.row_end : full;
  for (int64_t r = g.row_begin; r < end; r += kGroup) {
    const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
    for (int64_t a0 = 0; a0 < g.n_act; a0 += kMaxActs) {
      const int ra = int(g.n_act - a0 < kMaxActs ? g.n_act - a0 : kMaxActs);
      const uint8_t* x[kMaxActs];
      float* out[kMaxActs];
      for (int a = 0; a < ra; ++a) {
        x[a] = g.act + uint64_t(a0 + a) * g.act_row_bytes;
        out[a] = g.out + (a0 + a) * g.out_stride + r;
      }
      group[ra - 1](grp, nb, x, out);
    }
  }
  if (g.row_end > end) {
    GemmArgs rest = g;
    rest.row_begin = end > g.row_begin ? end : g.row_begin;
    rest.layout = 0;
    plain(rest);
  }
}

constexpr GroupFn kQ4K[kMaxActs] = {q4_K_group<1>, q4_K_group<2>, q4_K_group<3>};
constexpr GroupFn kQ6K[kMaxActs] = {q6_K_group<1>, q6_K_group<2>, q6_K_group<3>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_k_groups(g, kQ4K, gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_k_groups(g, kQ6K, gemm_q6_K); }
void gemm_q4_K_groups_vnni(const GemmArgs& g) { run_k_groups(g, kQ4K, avx2vnni::gemm_q4_K); }
void gemm_q6_K_groups_vnni(const GemmArgs& g) { run_k_groups(g, kQ6K, avx2vnni::gemm_q6_K); }

}  // namespace opal::cpu::avx2
#endif  // x86
