// Decode of Q4_K and Q6_K weights in the K-quant row groups of 8
// (kernels/repack.h, kLayoutKGroups8; the layout and the AVX2 kernels:
// x86_avx2/kquant_groups.h), with AVX-512 (BW, DQ, VNNI).
//
// The per-row AVX-512 decode kernels (kquants_avx512.cpp Q45KKernel,
// Q6KKernel) keep 16 float lanes per row: lane L < 8 holds the elements of
// the layout's pieces t = L for Q4_K's low nibbles (Q6_K: c = 0 and 2), lane
// L + 8 those of the same pieces' high nibbles (Q6_K: c = 1 and 3). So one
// zmm here holds lanes L and L + 8 of 8 rows: a piece broadcast to both
// 256-bit halves, its low nibbles kept in the lower half and its high nibbles
// shifted down in the upper (vpsrlw under a mask), against the activation's
// two 4-byte groups (one per half) and the rows' two scale pairs. The int32
// sums are exact (vpmaddubsw, then vpdpwssd by the scale pair); the float
// steps are the per-row kernel's (Q4_K: fma by d * d_x, fnmadd of the mins,
// which only lanes L < 8 carry; Q6_K: the -32 offset in lanes L < 8, fma by
// d * d_x), and the end is _mm512_reduce_add_ps's tree (upper half + lower
// half, then hsum8's), so a packed weight gives the plain layout's bits.
// Batches of 1-4 activation rows (the plain kernels' per-row sizes) share
// each group's unpacked quants. Rows past the last whole group are plain.
#if defined(__x86_64__) || defined(__i386__)
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/error.h"

namespace opal::cpu::avx512 {
namespace {
// The software prefetch, 8 KiB along the stream (stop 15: packed-decode*/avx2/q[46]_K and avx512, three
// interleaved passes at load 6.5-7: none 23-28 / 14-28 GB/s, 8 KiB 27.5-34 / 25-33; 16 and 32 KiB no
// better than 8 in a noisier sweep). The groups are one sequential stream, yet the hardware prefetchers
// alone left these kernels waiting, as the row groups of Q4_0 (16 KiB there).
constexpr int kKGroupPrefetch = 8 * 1024;

constexpr int64_t kGroup = 8;
constexpr int64_t kQ4KGroupBytes = kGroup * kQ4_KBytes;  // 1152
constexpr int64_t kQ6KGroupBytes = kGroup * kQ6_KBytes;  // 1680
constexpr int kMaxActs = 4;
constexpr __mmask32 kUpper16 = 0xFFFF0000u;  // the upper 256 bits, in int16 lanes

__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
int32_t word(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// Two 4-byte groups, the first broadcast to the lower 256 bits, the second to the upper.
__m512i bcast2(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_set1_epi32(word(lo)), _mm256_set1_epi32(word(hi)), 1);
}
__m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512 both_halves(__m256 v) { return _mm512_insertf32x8(_mm512_castps256_ps512(v), v, 1); }
__m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// A vpshufb control that picks, in every int32 lane k, bytes 4k + b0..b3 of
// the lane (b < 0: zero), the same in both 128-bit halves.
__m256i lane_bytes(int b0, int b1, int b2, int b3) {
  auto one = [](int b) { return uint32_t(b < 0 ? 0x80 : b); };
  const uint32_t v = one(b0) | one(b1) << 8 | one(b2) << 16 | one(b3) << 24;
  return _mm256_add_epi8(_mm256_set1_epi32(int(v)), _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0,
                                                                      0x04040404, 0x08080808, 0x0C0C0C0C));
}

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
  const __m256i lo4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi32(0x3F3F3F3F), m4 = _mm256_set1_epi32(0x0F0F0F0F),
                hi2 = _mm256_set1_epi32(0x30303030);
  const __m512i lo4z = _mm512_set1_epi8(0x0F);
  const __m256i pick[4] = {lane_bytes(0, -1, 0, -1), lane_bytes(1, -1, 1, -1), lane_bytes(2, -1, 2, -1),
                           lane_bytes(3, -1, 3, -1)};  // byte s as the int16 pair (s, s)
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ4KGroupBytes;
    for (int o = 0; o < kQ4KGroupBytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(gb + kKGroupPrefetch + o), _MM_HINT_T0);
    const __m256i w0 = load32(gb + 32), w1 = load32(gb + 64), w2 = load32(gb + 96);
    const __m256i sc[2] = {_mm256_and_si256(w0, m6),
                           _mm256_or_si256(_mm256_and_si256(w2, lo4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), hi2))};
    const __m256i mn[2] = {_mm256_and_si256(w1, m6), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                                                                     _mm256_and_si256(_mm256_srli_epi32(w1, 2), hi2))};
    __m512i s2[4];  // sub-blocks 2j (lower half) and 2j + 1 (upper)
    for (int j = 0; j < 4; ++j)
      s2[j] = join(_mm256_shuffle_epi8(sc[j / 2], pick[(2 * j) % 4]),
                   _mm256_shuffle_epi8(sc[j / 2], pick[(2 * j + 1) % 4]));
    const __m512 d = both_halves(load_f16x8(gb)), dmin = both_halves(load_f16x8(gb + 16));
    const uint8_t* xb[RA];
    __m512 dd[RA], dm[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      const __m512 xd = _mm512_set1_ps(load_f32(xb[a]));
      dd[a] = _mm512_mul_ps(d, xd);
      dm[a] = _mm512_mul_ps(dmin, xd);
    }
    for (int l = 0; l < 8; ++l) {
      __m512i isum[RA];
      for (int a = 0; a < RA; ++a) isum[a] = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_broadcast_i64x4(load32(gb + 128 + (4 * l + j) * 32));
        const __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, kUpper16, v, 4), lo4z);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 64 * j + 4 * l;
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q, bcast2(xq, xq + 32)), s2[j]);
        }
      }
      const __m256i ml = _mm256_shuffle_epi8(mn[l / 4], pick[l % 4]);
      for (int a = 0; a < RA; ++a) {
        const __m256i m8 = _mm256_madd_epi16(ml, _mm256_set1_epi32(word(xb[a] + kQ8_KBsums + 4 * l)));
        const __m512 m = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(m8));
        acc[a][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), dd[a], acc[a][l]);
        acc[a][l] = _mm512_fnmadd_ps(m, dm[a], acc[a][l]);
      }
    }
  }
  reduce_lanes<RA>(acc, out);
}

template <int RA>
void q6_K_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30);
  const __m256i pick[4] = {lane_bytes(-1, 0, -1, 0), lane_bytes(-1, 1, -1, 1), lane_bytes(-1, 2, -1, 2),
                           lane_bytes(-1, 3, -1, 3)};
  const __m256i pair[2] = {lane_bytes(-1, 0, -1, 1), lane_bytes(-1, 2, -1, 3)};
  __m512 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ6KGroupBytes;
    for (int o = 0; o < kQ6KGroupBytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(gb + kKGroupPrefetch + o), _MM_HINT_T0);
    __m256i sw[4];
    for (int q = 0; q < 4; ++q) sw[q] = load32(gb + 16 + 32 * q);
    __m256i s16[16];
    for (int s = 0; s < 16; ++s) s16[s] = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[s / 4], pick[s % 4]), 8);
    const __m512 d = both_halves(load_f16x8(gb));
    const uint8_t* xb[RA];
    __m512 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_KBytes;
      dd[a] = _mm512_mul_ps(d, _mm512_set1_ps(load_f32(xb[a])));
    }
    for (int l = 0; l < 8; ++l) {
      const __m256i sp = _mm256_srai_epi16(_mm256_shuffle_epi8(sw[l / 2], pair[l % 2]), 8);
      __m512i isum[RA];
      for (int a = 0; a < RA; ++a) isum[a] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const uint8_t* pq = gb + 144 + (2 * l + h) * 3 * 32;
        const __m512i ab = join(load32(pq), load32(pq + 32));
        const __m512i cc = _mm512_broadcast_i64x4(load32(pq + 64));
        const __m512i ch = _mm512_mask_srli_epi16(cc, kUpper16, cc, 2);  // qh bits 0-1 | 2-3 and 4-5 | 6-7 at 4-5
        const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ab, lo4), _mm512_and_si512(_mm512_slli_epi16(ch, 4), hi2));
        const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), lo4), _mm512_and_si512(ch, hi2));
        const int s = 8 * h + l / 4;
        const __m512i s01 = join(s16[s], s16[s + 2]), s23 = join(s16[s + 4], s16[s + 6]);
        for (int a = 0; a < RA; ++a) {
          const uint8_t* xq = xb[a] + kQ8_KQs + 128 * h + 4 * l;
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q01, bcast2(xq, xq + 32)), s01);
          isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_maddubs_epi16(q23, bcast2(xq + 64, xq + 96)), s23);
        }
      }
      for (int a = 0; a < RA; ++a) {
        const __m256i corr =
            _mm256_slli_epi32(_mm256_madd_epi16(sp, _mm256_set1_epi32(word(xb[a] + kQ8_KBsums + 4 * l))), 5);
        const __m512i sum = _mm512_sub_epi32(isum[a], _mm512_zextsi256_si512(corr));
        acc[a][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dd[a], acc[a][l]);
      }
    }
  }
  reduce_lanes<RA>(acc, out);
}

using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, float* const*);

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

constexpr GroupFn kQ4K[kMaxActs] = {q4_K_group<1>, q4_K_group<2>, q4_K_group<3>, q4_K_group<4>};
constexpr GroupFn kQ6K[kMaxActs] = {q6_K_group<1>, q6_K_group<2>, q6_K_group<3>, q6_K_group<4>};

}  // namespace

void gemm_q4_K_groups(const GemmArgs& g) { run_k_groups(g, kQ4K, gemm_q4_K); }
void gemm_q6_K_groups(const GemmArgs& g) { run_k_groups(g, kQ6K, gemm_q6_K); }

}  // namespace opal::cpu::avx512
#endif  // x86
