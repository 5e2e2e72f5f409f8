// Decode of Q4_K and Q6_K weights in the K-quant row groups of 8
// (kernels/repack.h, kLayoutKGroups8; the layout, the AVX2 kernels and the
// helpers shared here (scale unpack, offsets, the group walk):
// x86_avx2/kquant_groups.h), with AVX-512 (BW, DQ, VNNI).
//
// The per-row AVX-512 decode kernels (kquants_avx512.cpp Q45KKernel,
// Q6KKernel) keep 16 float lanes per row: lane L < 8 holds the elements of
// the layout's pieces t = L for Q4_K's low nibbles (Q6_K: c = 0 and 2), lane
// L + 8 those of the same pieces' high nibbles (Q6_K: c = 1 and 3). So one
// zmm here holds lanes L and L + 8 of 8 rows: a piece broadcast to both
// 256-bit halves, its low nibbles kept in the lower half and its high nibbles
// shifted down in the upper (vpsrlw under a mask), against the activation's
// two 4-byte groups (one per half: one vpermd of the 64 activation bytes the
// piece meets, loaded once per super-block) and the rows' two scale pairs.
// The int32 sums are exact (vpmaddubsw, then vpdpwssd by the scale pair); the
// float steps are the per-row kernel's (Q4_K: fma by d * d_x, fnmadd of the
// mins, which only lanes L < 8 carry; Q6_K: the -32 offset in lanes L < 8,
// fma by d * d_x), and the end is _mm512_reduce_add_ps's tree (upper half +
// lower half, then hsum8's), so a packed weight gives the plain layout's bits.
// Batches of 1-4 activation rows (the plain kernels' per-row sizes) share
// each group's unpacked quants, with no software prefetch (kquant_groups.h,
// kKGroupPrefetch: stop 37). Rows past the last whole group are plain.
//
// Larger batches (stop 17, gemm_packed_batch) read the groups in place in the
// plain batch kernels' lanes order (Q4KRowsInLanes, Q6KRowsInLanes): per row
// and super-block one exact int32 sum and one fma (Q4_K: and the mins'
// fnmadd), the result in the accumulator itself; a sub-block's pieces add in
// int16 (as the AVX2 form in kquant_groups.h) before one vpdpwssd. From
// kQ4KLanesFromActs / kQ6KLanesFromActs activation rows on the plain entry's
// RowsInLanes runs instead, its repack reading the groups: faster there (stop
// 34, below).
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/kernels/x86_avx2/kquant_groups.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {
constexpr __mmask32 kUpper16 = 0xFFFF0000u;  // the upper 256 bits, in int16 lanes

__m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512 both_halves(__m256 v) { return _mm512_insertf32x8(_mm512_castps256_ps512(v), v, 1); }
__m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }
// vpermd controls: dword l of the 64 loaded bytes in the lower half, dword 8 + l in the upper
// (the activation's 4 bytes at +4l and +32+4l).
struct LanePerm {
  __m512i idx[8];
  LanePerm() {
    for (int l = 0; l < 8; ++l) idx[l] = _mm512_inserti64x4(_mm512_set1_epi32(l), _mm256_set1_epi32(8 + l), 1);
  }
};

// _mm512_reduce_add_ps of each row's 16 lanes: acc[l] holds lanes l and l + 8 of 8 rows.
template <int RA>
void reduce_lanes(__m512 (*acc)[8], float* const* out) {
  for (int a = 0; a < RA; ++a) {
    __m256 t[8];
    for (int l = 0; l < 8; ++l)
      t[l] = _mm256_add_ps(_mm512_extractf32x8_ps(acc[a][l], 1), _mm512_castps512_ps256(acc[a][l]));
    const __m256 s0 = _mm256_add_ps(t[4], t[0]), s1 = _mm256_add_ps(t[5], t[1]);
    const __m256 s2 = _mm256_add_ps(t[6], t[2]), s3 = _mm256_add_ps(t[7], t[3]);
    _mm256_storeu_ps(out[a], _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
  }
}

template <int RA>
void q4_K_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m512i lo4z = _mm512_set1_epi8(0x0F);
  const LanePerm perm;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    const Q4KGroupScales scm(gb);
    __m512i s2[4];  // sub-blocks 2j (lower half) and 2j + 1 (upper)
    for (int j = 0; j < 4; ++j) s2[j] = join(scm.scale_pair(2 * j), scm.scale_pair(2 * j + 1));
    const __m512 d = both_halves(load_f16x8(gb)), dmin = both_halves(load_f16x8(gb + 16));
    const uint8_t* xb[RA];
    __m512 dd[RA], dm[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      const __m512 xd = _mm512_set1_ps(load_f32(xb[a]));
      dd[a] = _mm512_mul_ps(d, xd);
      dm[a] = _mm512_mul_ps(dmin, xd);
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      __m512i isum[RA];
      for (int a = 0; a < RA; ++a) isum[a] = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_broadcast_i64x4(load32(gb + 128 + (4 * l + j) * 32));
        const __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, kUpper16, v, 4), lo4z);
        for (int a = 0; a < RA; ++a) {
          const __m512i xv = _mm512_permutexvar_epi32(perm.idx[l], load64(xb[a] + kQ8_KQs + 64 * j));
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q, xv), s2[j]);
        }
      }
      const __m256i ml = scm.min_pair(l);
      for (int a = 0; a < RA; ++a) {
        const __m256i m8 = _mm256_madd_epi16(ml, bcast4(xb[a] + kQ8_KBsums + 4 * l));
        const __m512 m = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(m8));
        acc[a][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), dd[a], acc[a][l]);
        acc[a][l] = _mm512_fnmadd_ps(m, dm[a], acc[a][l]);
      }
    }
  }
  reduce_lanes<RA>(acc, out);
}

// The Q6_K pieces of lane l, half h (the triple p, q, r at pq; repack.h) as
// two zmm of 6-bit quants: q01 (c = 0 in the lower half, c = 1 in the upper)
// = (p | q) & 63; q23 (c = 2, c = 3): r & 63 below, above q3 = p >> 6 |
// (q >> 6) << 2 | (r >> 6) << 4 (p's and q's fields shifted by 6 and 4 in one
// vpsrlvw, the halves swapped and or-ed, r's field by a masked vpsrlw).
struct Q6KConsts {
  __m512i m6 = _mm512_set1_epi8(0x3F);
  __m512i shift = join(_mm256_set1_epi16(6), _mm256_set1_epi16(4));
  __m512i fields = join(_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x0C));
  __m512i r_mask = join(_mm256_set1_epi8(0x3F), _mm256_set1_epi8(0x30));
};
struct Q6KPieces {
  __m512i q01, q23;
  Q6KPieces(const uint8_t* pq, const Q6KConsts& k) {
    const __m512i pqv = join(load32(pq), load32(pq + 32));
    const __m512i rr = _mm512_broadcast_i64x4(load32(pq + 64));
    q01 = _mm512_and_si512(pqv, k.m6);
    const __m512i f = _mm512_and_si512(_mm512_srlv_epi16(pqv, k.shift), k.fields);
    const __m512i fpq = _mm512_or_si512(f, _mm512_shuffle_i64x2(f, f, 0x4E));
    const __m512i rs = _mm512_and_si512(_mm512_mask_srli_epi16(rr, kUpper16, rr, 2), k.r_mask);
    q23 = _mm512_mask_or_epi64(rs, 0xF0, rs, fpq);
  }
};

template <int RA>
void q6_K_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const Q6KConsts k6;
  const __m256i pair[2] = {lane_bytes(-1, 0, -1, 1), lane_bytes(-1, 2, -1, 3)};  // (sc_2L, sc_2L+1) high bytes
  const LanePerm perm;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    __m256i s16[16];
    q6_K_scale_pairs(sw, s16);
    const __m512 d = both_halves(load_f16x8(gb));
    const uint8_t* xb[RA];
    __m512 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      dd[a] = _mm512_mul_ps(d, _mm512_set1_ps(load_f32(xb[a])));
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m256i sp32 = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[l / 2], pair[l % 2]), 3);  // 32 sc
      __m512i isum[RA];
      for (int a = 0; a < RA; ++a) isum[a] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const Q6KPieces q(gb + 144 + (2 * l + h) * 3 * 32, k6);
        const int s = 8 * h + l / 4;
        const __m512i s01 = join(s16[s], s16[s + 2]), s23 = join(s16[s + 4], s16[s + 6]);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 128 * h;
          const __m512i x01 = _mm512_permutexvar_epi32(perm.idx[l], load64(xq));
          const __m512i x23 = _mm512_permutexvar_epi32(perm.idx[l], load64(xq + 64));
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q.q01, x01), s01);
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q.q23, x23), s23);
        }
      }
      for (int a = 0; a < RA; ++a) {
        const __m256i corr = _mm256_madd_epi16(sp32, bcast4(xb[a] + kQ8_KBsums + 4 * l));
        const __m512i sum = _mm512_sub_epi32(isum[a], _mm512_zextsi256_si512(corr));
        acc[a][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dd[a], acc[a][l]);
      }
    }
  }
  reduce_lanes<RA>(acc, out);
}

// The exact int32 sums of a zmm's two halves (8 rows).
__m256i fold_halves(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// Q4_K batches in the lanes order (that of q4_K_group_pairs_lanes in x86_avx2/kquant_groups.h, here on zmm
// over kLayoutKGroups8: sub-blocks 2j and 2j + 1 side by side).
template <int RA>
void q4_K_group_lanes512(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m512i lo4z = _mm512_set1_epi8(0x0F);
  const LanePerm perm;
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    prefetch_group(gb, kQ4KGroupBytes);
    const Q4KGroupScales scm(gb);
    const uint8_t* xb[RA];
    __m512i isum[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      isum[a] = _mm512_setzero_si512();
    }
    for (int j = 0; j < 4; ++j) {
      __m512i xj[RA], i16[RA];
      for (int a = 0; a < RA; ++a) {
        xj[a] = load64(xb[a] + kQ8_KQs + 64 * j);
        i16[a] = _mm512_setzero_si512();  // set before l = 0 overwrites it
      }
      for (int l = 0; l < 8; ++l) {
        const __m512i v = _mm512_broadcast_i64x4(load32(gb + 128 + (4 * l + j) * 32));
        const __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, kUpper16, v, 4), lo4z);
        for (int a = 0; a < RA; ++a) {
          const __m512i p = _mm512_maddubs_epi16(q, _mm512_permutexvar_epi32(perm.idx[l], xj[a]));
          i16[a] = l == 0 ? p : _mm512_add_epi16(i16[a], p);
        }
      }
      const __m512i s2 = join(scm.scale_pair(2 * j), scm.scale_pair(2 * j + 1));
      for (int a = 0; a < RA; ++a) isum[a] = _mm512_dpwssd_epi32(isum[a], i16[a], s2);
    }
    __m256i isum8[RA];
    for (int a = 0; a < RA; ++a) isum8[a] = fold_halves(isum[a]);
    q4_K_group_finish<RA>(gb, scm, xb, isum8, acc);
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// Q6_K batches in the lanes order (the AVX2 kLayoutKGroups8 form of stops 17-26 on zmm:
// c = 0 | 1 and 2 | 3 side by side, lanes l, l + 1 added in int16).
template <int RA>
void q6_K_group_lanes512(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const Q6KConsts k6;
  const __m256i pick[4] = {lane_bytes(-1, 0, -1, 0), lane_bytes(-1, 1, -1, 1), lane_bytes(-1, 2, -1, 2),
                           lane_bytes(-1, 3, -1, 3)};
  const LanePerm perm;
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    prefetch_group(gb, kQ6KGroupBytes);
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    auto scale = [&](int s) { return _mm256_srai_epi16(_mm256_shuffle_epi8(sw[s / 4], pick[s % 4]), 8); };
    const uint8_t* xb[RA];
    __m512i isum[RA];
    __m256i off[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      off[a] = q6_K_group_offset(sw, xb[a]);
      isum[a] = _mm512_setzero_si512();
    }
    for (int h = 0; h < 2; ++h) {
      __m512i x01[RA], x23[RA];
      for (int a = 0; a < RA; ++a) {
        x01[a] = load64(xb[a] + kQ8_KQs + 128 * h);
        x23[a] = load64(xb[a] + kQ8_KQs + 128 * h + 64);
      }
      for (int l = 0; l < 8; l += 2) {
        const Q6KPieces q0(gb + 144 + (2 * l + h) * 3 * 32, k6), q1(gb + 144 + (2 * l + 2 + h) * 3 * 32, k6);
        const int s = 8 * h + l / 4;
        const __m512i s01 = join(scale(s), scale(s + 2)), s23 = join(scale(s + 4), scale(s + 6));
        for (int a = 0; a < RA; ++a) {
          const __m512i p01 =
              _mm512_add_epi16(_mm512_maddubs_epi16(q0.q01, _mm512_permutexvar_epi32(perm.idx[l], x01[a])),
                               _mm512_maddubs_epi16(q1.q01, _mm512_permutexvar_epi32(perm.idx[l + 1], x01[a])));
          const __m512i p23 =
              _mm512_add_epi16(_mm512_maddubs_epi16(q0.q23, _mm512_permutexvar_epi32(perm.idx[l], x23[a])),
                               _mm512_maddubs_epi16(q1.q23, _mm512_permutexvar_epi32(perm.idx[l + 1], x23[a])));
          isum[a] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[a], p01, s01), p23, s23);
        }
      }
    }
    const __m256 d = load_f16x8(gb);
    for (int a = 0; a < RA; ++a) {
      const __m256i sum = _mm256_add_epi32(off[a], fold_halves(isum[a]));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, _mm256_set1_ps(load_f32(xb[a]))), acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// Q4_K in kLayoutQ4KGroups8Wide (repack.h, stop 39). A 64-byte load at
// q4_K_wide_piece(2u, j) is lanes 2u and 2u + 1 of 8 rows, dword 2r + e = row
// r's piece (2u + e, j); its low nibbles meet one vpbroadcastq of the
// activation's elements 64j + 8u .. +7 (dword e = elements 64j + 4(2u + e) ..),
// its high nibbles one of the 32 after them: no shuffle of the activation, where
// kLayoutKGroups8 takes a vpermd per piece and activation row (stop 38 measured
// that shuffle as the kernels' bound: Llama-3.2-1B Q4_K_M tg +9-17 % without it).
// The rows' scales, mins and d, dmin are spread to the dword pairs (2r, 2r + 1)
// once per super-block.
struct WideConsts {
  __m512i lo4 = _mm512_set1_epi8(0x0F);
  __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);  // dword 2r + e <- r
  __m512i same[4], pair[2];
  WideConsts() {
    const __m512i dword = _mm512_set1_epi32(0x04040404);
    const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3), dword);
    auto ctl = [&](__m512i bytes) {  // int16 pair (byte, byte) of each dword, zero-extended
      return _mm512_or_si512(_mm512_add_epi8(base, bytes), _mm512_set1_epi32(int(0x80008000u)));
    };
    for (int b = 0; b < 4; ++b) same[b] = ctl(_mm512_set1_epi32(b | b << 16));
    for (int v = 0; v < 2; ++v)  // dword 2r + e: byte 2v + e
      pair[v] = ctl(_mm512_setr_epi32(
          2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16, 2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16,
          2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16, 2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16,
          2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16, 2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16,
          2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16, 2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16));
  }
};

// A super-block's scales and mins on the dword pairs: scale(s) = (sc_s, sc_s) of row r in dwords 2r and 2r + 1;
// mins(u) = (m_2u+e, m_2u+e) of row r in dword 2r + e.
struct WideScales {
  __m512i sc[2], mn[2];
  WideScales(const Q4KGroupScales& scm, const WideConsts& k) {
    for (int h = 0; h < 2; ++h) {
      sc[h] = _mm512_permutexvar_epi32(k.dup, _mm512_zextsi256_si512(scm.sc[h]));
      mn[h] = _mm512_permutexvar_epi32(k.dup, _mm512_zextsi256_si512(scm.mn[h]));
    }
  }
  __m512i scale(int s, const WideConsts& k) const { return _mm512_shuffle_epi8(sc[s / 4], k.same[s % 4]); }
  __m512i mins(int u, const WideConsts& k) const { return _mm512_shuffle_epi8(mn[u / 2], k.pair[u % 2]); }
};

__m512i bcast8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// _mm512_reduce_add_ps of each row's 16 lanes where acc[a][u] holds lanes 2u + e and acc[a][4 + u] lanes
// 8 + 2u + e of 8 rows (dword 2r + e): T_u = hi + lo, (T_2 + T_0) + (T_3 + T_1) = (s0 + s2, s1 + s3) on the
// pair (reduce_lanes' sums), then the pair's sum.
template <int RA>
void reduce_wide(__m512 (*acc)[8], float* const* out) {
  for (int a = 0; a < RA; ++a) {
    __m512 t[4];
    for (int u = 0; u < 4; ++u) t[u] = _mm512_add_ps(acc[a][4 + u], acc[a][u]);
    const __m512 w = _mm512_add_ps(_mm512_add_ps(t[2], t[0]), _mm512_add_ps(t[3], t[1]));
    const __m512 r = _mm512_add_ps(w, _mm512_permute_ps(w, 0xB1));  // dword 2r: pair 2r + pair 2r + 1
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[a]), _mm512_cvtepi64_epi32(_mm512_castps_si512(r)));
  }
}

// Decode and 2-4 rows in the plain kernels' 16-lane order (q4_K_group's bits):
// acc[a][u] (low nibbles, lanes 2u + e, with the mins) and acc[a][4 + u] (high
// nibbles, lanes 8 + 2u + e), then _mm512_reduce_add_ps's tree per row (reduce_wide).
template <int RA>
void q4_K_wide(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    const WideScales ws(Q4KGroupScales(gb), k);
    __m512i s[8];
    for (int t = 0; t < 8; ++t) s[t] = ws.scale(t, k);
    const __m512 d = _mm512_permutexvar_ps(k.dup, _mm512_castps256_ps512(load_f16x8(gb)));
    const __m512 dmin = _mm512_permutexvar_ps(k.dup, _mm512_castps256_ps512(load_f16x8(gb + 16)));
    const uint8_t* xb[RA];
    __m512 dd[RA], dm[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      const __m512 xd = _mm512_set1_ps(load_f32(xb[a]));
      dd[a] = _mm512_mul_ps(d, xd);
      dm[a] = _mm512_mul_ps(dmin, xd);
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      __m512i ilo[RA], ihi[RA];
      for (int a = 0; a < RA; ++a) ilo[a] = ihi[a] = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i v = load64(gb + q4_K_wide_piece(2 * u, j));
        const __m512i qlo = _mm512_and_si512(v, k.lo4), qhi = _mm512_and_si512(_mm512_srli_epi16(v, 4), k.lo4);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 64 * j + 8 * u;
          ilo[a] = _mm512_dpwssd_epi32(ilo[a], _mm512_maddubs_epi16(qlo, bcast8(xq)), s[2 * j]);
          ihi[a] = _mm512_dpwssd_epi32(ihi[a], _mm512_maddubs_epi16(qhi, bcast8(xq + 32)), s[2 * j + 1]);
        }
      }
      const __m512i mp = ws.mins(u, k);
      for (int a = 0; a < RA; ++a) {
        const __m512 m = _mm512_cvtepi32_ps(_mm512_madd_epi16(mp, bcast8(xb[a] + kQ8_KBsums + 8 * u)));
        acc[a][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ilo[a]), dd[a], acc[a][u]);
        acc[a][u] = _mm512_fnmadd_ps(m, dm[a], acc[a][u]);
        acc[a][4 + u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ihi[a]), dd[a], acc[a][4 + u]);
      }
    }
  }
  reduce_wide<RA>(acc, out);
}

// The exact int32 sums of the dword pairs (2r, 2r + 1): 8 rows.
__m256i fold_pairs(__m512i v) { return _mm512_cvtepi64_epi32(_mm512_add_epi32(v, _mm512_srli_epi64(v, 32))); }

// Batches in the lanes order (q4_K_group_lanes512's bits: one exact int32 per row and super-block, then
// q4_K_group_finish), reading the groups in their order as q4_K_wide does (two int32 chains per activation row:
// the low nibbles' and the high nibbles'), with the batch kernels' prefetch (decode runs without, stop 37).
template <int RA>
void q4_K_wide_lanes(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    prefetch_group(gb, kQ4KGroupBytes);
    const Q4KGroupScales scm(gb);
    const WideScales ws(scm, k);
    __m512i s[8];
    for (int t = 0; t < 8; ++t) s[t] = ws.scale(t, k);
    const uint8_t* xb[RA];
    __m512i ilo[RA], ihi[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      ilo[a] = ihi[a] = _mm512_setzero_si512();
    }
    for (int u = 0; u < 4; ++u)
      for (int j = 0; j < 4; ++j) {
        const __m512i v = load64(gb + q4_K_wide_piece(2 * u, j));
        const __m512i qlo = _mm512_and_si512(v, k.lo4), qhi = _mm512_and_si512(_mm512_srli_epi16(v, 4), k.lo4);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 64 * j + 8 * u;
          ilo[a] = _mm512_dpwssd_epi32(ilo[a], _mm512_maddubs_epi16(qlo, bcast8(xq)), s[2 * j]);
          ihi[a] = _mm512_dpwssd_epi32(ihi[a], _mm512_maddubs_epi16(qhi, bcast8(xq + 32)), s[2 * j + 1]);
        }
      }
    __m256i isum8[RA];
    for (int a = 0; a < RA; ++a) isum8[a] = fold_pairs(_mm512_add_epi32(ilo[a], ihi[a]));
    q4_K_group_finish<RA>(gb, scm, xb, isum8, acc);
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// Q6_K in kLayoutQ6KGroups8Wide (repack.h, stop 39): the pieces p, q, r of lanes 2u and 2u + 1 (half h) are
// three 64-byte loads, a row per dword pair, whose four 6-bit vectors (c = 0..3: elements 128h + 32c + 8u ..
// +7) meet one vpbroadcastq of the activation each: c = 0-2 one mask (& 63), c = 3 the top two bits of the
// three (three shifts, two bit-selects, a mask). The rows' 16 scales are spread to the dword pairs once per
// super-block (sign-extended int16 pairs (sc, sc)), and the -32 offset's pairs (sc_2L, sc_2L+1) * 32 of lane
// L = 2u + e per lane pair.
struct Q6KWide {
  __m512i m6 = _mm512_set1_epi8(0x3F), b23 = _mm512_set1_epi8(0x0C), b45 = _mm512_set1_epi8(0x30);
  __m512i hi_same[4], off_pair;
  Q6KWide() {
    const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3),
                                            _mm512_set1_epi32(0x04040404));
    auto ctl = [&](__m512i bytes) {  // the bytes in the high byte of each int16, the low bytes zeroed
      return _mm512_or_si512(_mm512_add_epi8(base, bytes), _mm512_set1_epi32(0x00800080));
    };
    for (int b = 0; b < 4; ++b) hi_same[b] = ctl(_mm512_set1_epi32(b << 8 | b << 24));
    off_pair = ctl(_mm512_mask_blend_epi32(0xAAAA, _mm512_set1_epi32(1 << 24), _mm512_set1_epi32(2 << 8 | 3 << 24)));
  }
  // c = 0..3 of a piece triple at pq (p, q, r 64 bytes apart).
  void unpack(const uint8_t* pq, __m512i c[4]) const {
    const __m512i p = load64(pq), q = load64(pq + 64), r = load64(pq + 128);
    c[0] = _mm512_and_si512(p, m6);
    c[1] = _mm512_and_si512(q, m6);
    c[2] = _mm512_and_si512(r, m6);
    const __m512i pq2 = _mm512_ternarylogic_epi32(b23, _mm512_srli_epi16(q, 4), _mm512_srli_epi16(p, 6), 0xCA);
    c[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(b45, _mm512_srli_epi16(r, 2), pq2, 0xCA), m6);
  }
};

// A Q6_K group super-block's scale words on the dword pairs.
struct Q6KWideScales {
  __m512i w[4];
  Q6KWideScales(const uint8_t* gb, const WideConsts& k) {
    for (int q = 0; q < 4; ++q)
      w[q] = _mm512_permutexvar_epi32(k.dup, _mm512_zextsi256_si512(load32(gb + 16 + 32 * q)));
  }
  // (sc_s, sc_s) of row r in dwords 2r and 2r + 1, sign-extended.
  __m512i scale(int s, const Q6KWide& k6) const {
    return _mm512_srai_epi16(_mm512_shuffle_epi8(w[s / 4], k6.hi_same[s % 4]), 8);
  }
  // 32 (sc_2L, sc_2L+1) of row r in dword 2r + e, L = 2u + e (scale word u, bytes 2e and 2e + 1).
  __m512i offset_pair(int u, const Q6KWide& k6) const {
    return _mm512_srai_epi16(_mm512_shuffle_epi8(w[u], k6.off_pair), 3);
  }
};

// Decode and 2-4 rows in the plain kernels' 16-lane order (q6_K_group's bits): acc[a][u] lanes 2u + e (c = 0
// and 2, less the offset), acc[a][4 + u] lanes 8 + 2u + e (c = 1 and 3).
template <int RA>
void q6_K_wide(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  const Q6KWide k6;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    const Q6KWideScales ws(gb, k);
    __m512i s[16];
    for (int t = 0; t < 16; ++t) s[t] = ws.scale(t, k6);
    const __m512 d = _mm512_permutexvar_ps(k.dup, _mm512_castps256_ps512(load_f16x8(gb)));
    const uint8_t* xb[RA];
    __m512 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      dd[a] = _mm512_mul_ps(d, _mm512_set1_ps(load_f32(xb[a])));
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      __m512i ilo[RA], ihi[RA];
      for (int a = 0; a < RA; ++a) ilo[a] = ihi[a] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i c[4];
        k6.unpack(gb + q6_K_wide_piece(2 * u, h, 0), c);
        const int sb = 8 * h + u / 2;
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 128 * h + 8 * u;
          ilo[a] = _mm512_dpwssd_epi32(ilo[a], _mm512_maddubs_epi16(c[0], bcast8(xq)), s[sb]);
          ihi[a] = _mm512_dpwssd_epi32(ihi[a], _mm512_maddubs_epi16(c[1], bcast8(xq + 32)), s[sb + 2]);
          ilo[a] = _mm512_dpwssd_epi32(ilo[a], _mm512_maddubs_epi16(c[2], bcast8(xq + 64)), s[sb + 4]);
          ihi[a] = _mm512_dpwssd_epi32(ihi[a], _mm512_maddubs_epi16(c[3], bcast8(xq + 96)), s[sb + 6]);
        }
      }
      const __m512i op = ws.offset_pair(u, k6);
      for (int a = 0; a < RA; ++a) {
        const __m512i corr = _mm512_madd_epi16(op, bcast8(xb[a] + kQ8_KBsums + 8 * u));
        acc[a][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ilo[a], corr)), dd[a], acc[a][u]);
        acc[a][4 + u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ihi[a]), dd[a], acc[a][4 + u]);
      }
    }
  }
  reduce_wide<RA>(acc, out);
}

// Batches in the lanes order (q6_K_group_lanes512's bits: one exact int32 per row and super-block with the
// offset, one FMA), with the batch kernels' prefetch.
template <int RA>
void q6_K_wide_lanes(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  const Q6KWide k6;
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    prefetch_group(gb, kQ6KGroupBytes);
    const Q6KWideScales ws(gb, k);
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    const uint8_t* xb[RA];
    __m512i isum[RA], jsum[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      isum[a] = jsum[a] = _mm512_setzero_si512();
    }
    for (int u = 0; u < 4; ++u)
      for (int h = 0; h < 2; ++h) {
        __m512i c[4];
        k6.unpack(gb + q6_K_wide_piece(2 * u, h, 0), c);
        const int sb = 8 * h + u / 2;
        const __m512i s0 = ws.scale(sb, k6), s1 = ws.scale(sb + 2, k6), s2 = ws.scale(sb + 4, k6),
                      s3 = ws.scale(sb + 6, k6);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 128 * h + 8 * u;
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(c[0], bcast8(xq)), s0);
          jsum[a] = _mm512_dpwssd_epi32(jsum[a], _mm512_maddubs_epi16(c[1], bcast8(xq + 32)), s1);
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(c[2], bcast8(xq + 64)), s2);
          jsum[a] = _mm512_dpwssd_epi32(jsum[a], _mm512_maddubs_epi16(c[3], bcast8(xq + 96)), s3);
        }
      }
    const __m256 d = load_f16x8(gb);
    for (int a = 0; a < RA; ++a) {
      const __m256i sum =
          _mm256_add_epi32(q6_K_group_offset(sw, xb[a]), fold_pairs(_mm512_add_epi32(isum[a], jsum[a])));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, _mm256_set1_ps(load_f32(xb[a]))), acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// From this many activation rows on, batches run the plain entry's RowsInLanes (16 rows a zmm, the same lanes
// order, so the same bits) with its per-call repack reading the groups in place (stop 34,
// gemm_q4_K_groups_rows_in_lanes in kquants_avx512.cpp): it outruns the in-place form once that repack is shared by
// enough activation rows. Until stop 33 MUL_MAT unpacked the rows to the GGUF's layout for it from 128 rows on.
// bench_matmul_kernels, one thread, GB/s of weights (kq-packed-batch<M>) and GOP/s (packed-prompt = 64 rows,
// pp128-2048, pp512-2048), in place / rows in lanes on the groups:
//   Q4_K: 12 rows 4.5-5.9 / 3.9-4.0, 16: 3.6-4.4 / 3.6-3.7, 24: 2.4-3.2 / 2.9-3.2, 32: 1.8-2.4 / 2.5-2.7;
//         64 rows 273-285 / 462 GOP/s, 128 rows 443-445 / 520-551 (stop 33's unpack: 377-391).
//   Q6_K: 12 rows 5.1-7.5 / 5.9-7.2, 16: 4.2-4.6 / 5.1-6.1, 24: 2.9-3.7 / 4.3-4.7, 32: 2.1 / 3.4-3.6;
//         64 rows 221-242 / 434-494 GOP/s, 128 rows 354-367 / 440-505 (stop 33's unpack: 286-300).
// On AVX2 the in-place forms stay ahead at 512 (kquant_groups.h).
constexpr int64_t kQ4KLanesFromActs = 32, kQ6KLanesFromActs = 16;

constexpr GroupFn kQ4KWide[kMaxActs] = {q4_K_wide<1>, q4_K_wide<2>, q4_K_wide<3>, q4_K_wide<4>};
constexpr GroupFn kQ4KWideLanes[kMaxActs] = {q4_K_wide_lanes<1>, q4_K_wide_lanes<2>, q4_K_wide_lanes<3>,
                                             q4_K_wide_lanes<4>};
constexpr GroupFn kQ4K[kMaxActs] = {q4_K_group<1>, q4_K_group<2>, q4_K_group<3>, q4_K_group<4>};
constexpr GroupFn kQ6K[kMaxActs] = {q6_K_group<1>, q6_K_group<2>, q6_K_group<3>, q6_K_group<4>};
constexpr GroupFn kQ6KWide[kMaxActs] = {q6_K_wide<1>, q6_K_wide<2>, q6_K_wide<3>, q6_K_wide<4>};
constexpr GroupFn kQ6KWideLanes[kMaxActs] = {q6_K_wide_lanes<1>, q6_K_wide_lanes<2>, q6_K_wide_lanes<3>,
                                             q6_K_wide_lanes<4>};
constexpr GroupFn kQ4KLanes[kMaxActs] = {q4_K_group_lanes512<1>, q4_K_group_lanes512<2>, q4_K_group_lanes512<3>,
                                         q4_K_group_lanes512<4>};
constexpr GroupFn kQ6KLanes[kMaxActs] = {q6_K_group_lanes512<1>, q6_K_group_lanes512<2>, q6_K_group_lanes512<3>,
                                         q6_K_group_lanes512<4>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) {
  run_k_groups(g, g.layout == kLayoutQ4KGroups8Wide ? kQ4KWide : kQ4K, kMaxActs, gemm_q4_K);
}
void gemm_q6_K_groups(const GemmArgs& g) {
  run_k_groups(g, g.layout == kLayoutQ6KGroups8Wide ? kQ6KWide : kQ6K, kMaxActs, gemm_q6_K);
}
bool gemm_q4_K_groups_batch(const GemmArgs& g) {
  if (g.n_act >= kQ4KLanesFromActs) return gemm_q4_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, g.layout == kLayoutQ4KGroups8Wide ? kQ4KWideLanes : kQ4KLanes, gemm_q4_K);
}
bool gemm_q6_K_groups_batch(const GemmArgs& g) {
  if (g.n_act >= kQ6KLanesFromActs) return gemm_q6_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, g.layout == kLayoutQ6KGroups8Wide ? kQ6KWideLanes : kQ6KLanes, gemm_q6_K);
}

}  // namespace opal::cpu::avx512
#endif  // x86
