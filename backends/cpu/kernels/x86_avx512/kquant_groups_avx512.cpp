// Decode of Q4_K and Q6_K weights in the AVX-512 K-quant row groups of 8,
// kLayoutQ4KGroups8Wide and kLayoutQ6KGroups8Wide (kernels/repack.h, stop 39;
// the groups' d, scales and Q6_K's re-encoded triples as kLayoutKGroups8's, the
// helpers shared with the AVX2 kernels (scale unpack, offsets, the group walk)
// in x86_avx2/kquant_groups.h), with AVX-512 (BW, DQ, VNNI).
//
// The per-row AVX-512 decode kernels (kquants_avx512.cpp Q45KKernel,
// Q6KKernel) keep 16 float lanes per row: lane L < 8 holds the elements of
// pieces t = L for Q4_K's low nibbles (Q6_K: c = 0 and 2), lane L + 8 those of
// the same pieces' high nibbles (Q6_K: c = 1 and 3). In the wide layouts lanes
// 2u and 2u + 1 of a row are side by side, so one 64-byte load is two lanes of 8
// rows (dword 2r + e: row r, lane 2u + e) and the 8 activation bytes the pair
// meets are one vpbroadcastq of the compact Q8_K row: no activation shuffle
// (kLayoutKGroups8's zmm held lanes L and L + 8, whose halves needed a vpermd
// of the activation per piece and activation row: on Zen 4 the kernels' bound,
// stop 38). The int32 sums are exact (vpmaddubsw, then vpdpwssd by the rows'
// scale pairs, spread to the dword pairs once per super-block); the float steps
// are the per-row kernel's (Q4_K: fma by d * d_x, fnmadd of the mins, which
// only lanes L < 8 carry; Q6_K: the -32 offset in lanes L < 8, fma by d * d_x),
// and the end is _mm512_reduce_add_ps's tree on the pairs (reduce_wide), so a
// packed weight gives the plain layout's bits. Batches of 1-4 activation rows
// (the plain kernels' per-row sizes) share each group's unpacked quants; 1-3
// rows prefetch 8 KiB along the stream where decode_prefetch() says so (every
// host but AMD's AVX-512 cores, which decode faster without: stop 37; an Intel
// Xeon 1.17-1.33x faster with it, stop 43), 4 rows never. Rows past
// the last whole group are plain.
//
// Larger batches (stop 17, gemm_packed_batch) read the groups in place in the
// plain batch kernels' lanes order (Q4KRowsInLanes, Q6KRowsInLanes): per row
// and super-block one exact int32 sum and one fma (Q4_K: and the mins'
// fnmadd), the result in the accumulator itself. From kQ4KLanesFromActs /
// kQ6KLanesFromActs activation rows on the plain entry's RowsInLanes runs
// instead, its repack reading the groups: faster there (stop 34, below).
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/kernels/x86_avx2/kquant_groups.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"

namespace opal::cpu::avx512 {
namespace {
__m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }

// Q4_K in kLayoutQ4KGroups8Wide (repack.h, stop 39). A 64-byte load at
// q4_K_wide_piece(2u, j) is lanes 2u and 2u + 1 of 8 rows, dword 2r + e = row
// r's piece (2u + e, j); its low nibbles meet one vpbroadcastq of the
// activation's elements 64j + 8u .. +7 (dword e = elements 64j + 4(2u + e) ..),
// its high nibbles one of the 32 after them: no shuffle of the activation.
// The rows' scales, mins and d, dmin are spread to the dword pairs (2r, 2r + 1)
// once per super-block.
// A vpshufb control: in every dword, the bytes of `bytes` (0-3, the same dword's) offset to that dword's place in
// its 128-bit lane, the bytes set in `zero` (0x80 each) zeroed.
__m512i dword_bytes(__m512i bytes, __m512i zero) {
  const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3),
                                          _mm512_set1_epi32(0x04040404));
  return _mm512_or_si512(_mm512_add_epi8(base, bytes), zero);
}
// Odd dwords from `odd`, even ones from `even`.
__m512i even_odd(int32_t even, int32_t odd) {
  return _mm512_mask_blend_epi32(0xAAAA, _mm512_set1_epi32(even), _mm512_set1_epi32(odd));
}

struct WideConsts {
  __m512i lo4 = _mm512_set1_epi8(0x0F);
  __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);  // dword 2r + e <- r
  __m512i same[4], pair[2];
  WideConsts() {
    const __m512i high = _mm512_set1_epi32(int(0x80008000u));  // int16 pairs (byte, byte), zero-extended
    for (int b = 0; b < 4; ++b) same[b] = dword_bytes(_mm512_set1_epi32(b | b << 16), high);
    for (int v = 0; v < 2; ++v)  // dword 2r + e: byte 2v + e
      pair[v] = dword_bytes(even_odd(2 * v | 2 * v << 16, (2 * v + 1) | (2 * v + 1) << 16), high);
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
// pair (hsum8's sums over lanes l = hi + lo), then the pair's sum.
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

// Decode and 2-4 rows in the plain kernels' 16-lane order (Q45KKernel's bits):
// acc[a][u] (low nibbles, lanes 2u + e, with the mins) and acc[a][4 + u] (high
// nibbles, lanes 8 + 2u + e), then _mm512_reduce_add_ps's tree per row (reduce_wide).
template <int RA, bool kPrefetch>
void q4_K_wide(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ4KGroupBytes);
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

// Batches in the lanes order (Q4KRowsInLanes' bits: one exact int32 per row and super-block, then
// q4_K_group_finish), reading the groups in their order as q4_K_wide does (two int32 chains per activation row:
// the low nibbles' and the high nibbles'), with the batch kernels' prefetch (decode's is q4_K_wide's).
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
    const __m512i low = _mm512_set1_epi32(0x00800080);  // the bytes in the high byte of each int16
    for (int b = 0; b < 4; ++b) hi_same[b] = dword_bytes(_mm512_set1_epi32(b << 8 | b << 24), low);
    off_pair = dword_bytes(even_odd(1 << 24, 2 << 8 | 3 << 24), low);
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

// Decode and 2-4 rows in the plain kernels' 16-lane order (Q6KKernel's bits): acc[a][u] lanes 2u + e (c = 0
// and 2, less the offset), acc[a][4 + u] lanes 8 + 2u + e (c = 1 and 3).
template <int RA, bool kPrefetch>
void q6_K_wide(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const WideConsts k;
  const Q6KWide k6;
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    if constexpr (kPrefetch) prefetch_group(gb, kQ6KGroupBytes);
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

// Batches in the lanes order (Q6KRowsInLanes' bits: one exact int32 per row and super-block with the
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
    __m512i s[16];  // each scale meets two lane pairs
    for (int t = 0; t < 16; ++t) s[t] = ws.scale(t, k6);
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
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 128 * h + 8 * u;
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(c[0], bcast8(xq)), s[sb]);
          jsum[a] = _mm512_dpwssd_epi32(jsum[a], _mm512_maddubs_epi16(c[1], bcast8(xq + 32)), s[sb + 2]);
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(c[2], bcast8(xq + 64)), s[sb + 4]);
          jsum[a] = _mm512_dpwssd_epi32(jsum[a], _mm512_maddubs_epi16(c[3], bcast8(xq + 96)), s[sb + 6]);
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

// Decode (1-3 activation rows) prefetches the stream where decode_prefetch() says so (matmul_kernels.h; 8 KiB on,
// kKGroupPrefetch); 4 rows never do, as the batches.
template <bool kPrefetch>
constexpr GroupFn kQ4KWide[kMaxActs] = {q4_K_wide<1, kPrefetch>, q4_K_wide<2, kPrefetch>, q4_K_wide<3, kPrefetch>,
                                        q4_K_wide<4, false>};
constexpr GroupFn kQ4KWideLanes[kMaxActs] = {q4_K_wide_lanes<1>, q4_K_wide_lanes<2>, q4_K_wide_lanes<3>,
                                             q4_K_wide_lanes<4>};
template <bool kPrefetch>
constexpr GroupFn kQ6KWide[kMaxActs] = {q6_K_wide<1, kPrefetch>, q6_K_wide<2, kPrefetch>, q6_K_wide<3, kPrefetch>,
                                        q6_K_wide<4, false>};
constexpr GroupFn kQ6KWideLanes[kMaxActs] = {q6_K_wide_lanes<1>, q6_K_wide_lanes<2>, q6_K_wide_lanes<3>,
                                             q6_K_wide_lanes<4>};

// The groups read here are the wide layouts only (kLayoutKGroups8 has no AVX-512 kernels since stop 39).
void require_layout(const GemmArgs& g, uint8_t layout, const char* type) {
  if (g.layout != layout)
    fail("AVX-512 {} group gemm: weight layout '{}', expected '{}'", type, layout_name(g.layout), layout_name(layout));
}

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) {
  require_layout(g, kLayoutQ4KGroups8Wide, "Q4_K");
  run_k_groups(g, decode_prefetch() ? kQ4KWide<true> : kQ4KWide<false>, kMaxActs, gemm_q4_K);
}
void gemm_q6_K_groups(const GemmArgs& g) {
  require_layout(g, kLayoutQ6KGroups8Wide, "Q6_K");
  run_k_groups(g, decode_prefetch() ? kQ6KWide<true> : kQ6KWide<false>, kMaxActs, gemm_q6_K);
}
bool gemm_q4_K_groups_batch(const GemmArgs& g) {
  require_layout(g, kLayoutQ4KGroups8Wide, "Q4_K");
  if (g.n_act >= kQ4KLanesFromActs) return gemm_q4_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, kQ4KWideLanes, gemm_q4_K);
}
bool gemm_q6_K_groups_batch(const GemmArgs& g) {
  require_layout(g, kLayoutQ6KGroups8Wide, "Q6_K");
  if (g.n_act >= kQ6KLanesFromActs) return gemm_q6_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, kQ6KWideLanes, gemm_q6_K);
}

}  // namespace opal::cpu::avx512
#endif  // x86
