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

constexpr GroupFn kQ4K[kMaxActs] = {q4_K_group<1>, q4_K_group<2>, q4_K_group<3>, q4_K_group<4>};
constexpr GroupFn kQ6K[kMaxActs] = {q6_K_group<1>, q6_K_group<2>, q6_K_group<3>, q6_K_group<4>};
constexpr GroupFn kQ4KLanes[kMaxActs] = {q4_K_group_lanes512<1>, q4_K_group_lanes512<2>, q4_K_group_lanes512<3>,
                                         q4_K_group_lanes512<4>};
constexpr GroupFn kQ6KLanes[kMaxActs] = {q6_K_group_lanes512<1>, q6_K_group_lanes512<2>, q6_K_group_lanes512<3>,
                                         q6_K_group_lanes512<4>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_k_groups(g, kQ4K, kMaxActs, gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_k_groups(g, kQ6K, kMaxActs, gemm_q6_K); }
bool gemm_q4_K_groups_batch(const GemmArgs& g) {
  if (g.n_act >= kQ4KLanesFromActs) return gemm_q4_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, kQ4KLanes, gemm_q4_K);
}
bool gemm_q6_K_groups_batch(const GemmArgs& g) {
  if (g.n_act >= kQ6KLanesFromActs) return gemm_q6_K_groups_rows_in_lanes(g);
  return run_k_group_batch(g, kQ6KLanes, gemm_q6_K);
}

}  // namespace opal::cpu::avx512
#endif  // x86
