// Decode and small batches (up to 16 activation rows) of Q5_0 weights
// repacked at load into row groups of 8 (kernels/repack.h, kLayoutRowGroups8),
// with AVX-VNNI (the avx2-vnni ISA): row_groups_avx2.cpp's Q5_0 kernel with
// one vpdpbusd per piece where plain AVX2 takes vpmaddubsw, vpmaddwd by ones
// and the subtraction of the offset.
//
// Layout per group and 32-element block (176 bytes): the 8 rows' f16 scales,
// the 8 rows' qh words (bits moved so that the 4 fifth bits of a piece sit at
// one position in their bytes), then pieces t = 0..3 of 8 rows x 4 bytes
// (qs[4t .. 4t + 3]: low nibbles elements 4t .. 4t + 3, high nibbles 16 + 4t
// ..). Piece t gives int32 lanes t and t + 4 of the 8 rows (a row per lane):
// the plain kernel's lane L sums elements 4L .. 4L + 3 of (q - 16) * x, which
// here is vpdpbusd(-16 * (x_4L + .. + x_4L+3), q, x_4L..4L+3 broadcast), exact.
// Then the plain kernel's float steps (convert, FMA by d_w * d_x into float
// lane L, hsum8's tree per row), so the results are the plain layout's bits
// (legacy_avx2.cpp LegacyDecode<Q5_0Weights>, which avx2-vnni's Q5_0 entry
// runs for decode and batches up to 16). Rows past the last whole group are
// plain: avx2-vnni's gemm takes them.
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2vnni {
namespace {

constexpr int64_t kGroup = 8;
constexpr int64_t kQ5_0Group = kGroup * kQ5_0Bytes;  // 176
constexpr int kMaxActs = 3;
// As the AVX2 row-group kernels: a slice's first 16 KiB up front, 16 KiB on along the stream.
constexpr int64_t kPrefetch = 16 * 1024, kHeadBytes = 16 * 1024;

__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

template <int P>
__m256i fifth_bits(__m256i qh) {
  if constexpr (P < 4) return _mm256_slli_epi32(qh, 4 - P);
  else if constexpr (P > 4) return _mm256_srli_epi32(qh, P - 4);
  else return qh;
}

// c[8b + L] = -16 * (x_4L + .. + x_4L+3) over block b of a Q8_0 activation row.
void q5_0_offsets(const uint8_t* x, int64_t nb, int32_t* c) {
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i s =
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), load32(x + b * kQ8_0Bytes + 2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * b), _mm256_sub_epi32(_mm256_setzero_si256(), s));
  }
}

template <int RA, int T>
void q5_0_piece(const uint8_t* gb, __m256i qh, const uint8_t* const* xb, const int32_t* const* cb, const __m256* dd,
                __m256 (*acc)[8]) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m256i v = load32(gb + 48 + 32 * T);
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(v, lo4), _mm256_and_si256(fifth_bits<2 * T>(qh), bit4));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo4),
                                     _mm256_and_si256(fifth_bits<2 * T + 1>(qh), bit4));
  for (int a = 0; a < RA; ++a) {
    const __m256i s0 = _mm256_dpbusd_avx_epi32(_mm256_set1_epi32(cb[a][T]), q0, bcast4(xb[a] + 2 + 4 * T));
    const __m256i s1 = _mm256_dpbusd_avx_epi32(_mm256_set1_epi32(cb[a][T + 4]), q1, bcast4(xb[a] + 18 + 4 * T));
    acc[a][T] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd[a], acc[a][T]);
    acc[a][T + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd[a], acc[a][T + 4]);
  }
}

template <int RA>
void q5_0_group(const uint8_t* grp, int64_t nb, const uint8_t* const* x, const int32_t* const* c, float* const* out,
                bool prefetch) {
  __m256 acc[RA][8];
  for (int a = 0; a < RA; ++a)
    for (int l = 0; l < 8; ++l) acc[a][l] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kQ5_0Group;
    if (prefetch)
      for (int o = 0; o < kQ5_0Group; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(gb + kPrefetch + o), _MM_HINT_T0);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    const uint8_t* xb[RA];
    const int32_t* cb[RA];
    __m256 dd[RA];
    for (int a = 0; a < RA; ++a) {
      xb[a] = x[a] + b * kQ8_0Bytes;
      cb[a] = c[a] + 8 * b;
      dd[a] = _mm256_mul_ps(d, _mm256_set1_ps(load_f16(xb[a])));
    }
    const __m256i qh = load32(gb + 16);
    q5_0_piece<RA, 0>(gb, qh, xb, cb, dd, acc);
    q5_0_piece<RA, 1>(gb, qh, xb, cb, dd, acc);
    q5_0_piece<RA, 2>(gb, qh, xb, cb, dd, acc);
    q5_0_piece<RA, 3>(gb, qh, xb, cb, dd, acc);
  }
  for (int a = 0; a < RA; ++a) {  // hsum8's tree per row
    const __m256 s0 = _mm256_add_ps(acc[a][0], acc[a][4]), s1 = _mm256_add_ps(acc[a][1], acc[a][5]);
    const __m256 s2 = _mm256_add_ps(acc[a][2], acc[a][6]), s3 = _mm256_add_ps(acc[a][3], acc[a][7]);
    _mm256_storeu_ps(out[a], _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
  }
}

using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, const int32_t* const*, float* const*, bool);
constexpr GroupFn kQ5_0[kMaxActs] = {q5_0_group<1>, q5_0_group<2>, q5_0_group<3>};

}  // namespace

void gemm_q5_0_groups(const GemmArgs& g) {
  if (g.row_begin % kGroup != 0) fail("row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  const int64_t nb = g.k / 32;
  const int64_t full = g.n_rows / kGroup * kGroup;
  const int64_t end = g.row_end < full ? g.row_end : full;
  if (end > g.row_begin) {
    thread_local std::vector<int32_t> offsets;
    offsets.resize(size_t(g.n_act * nb * 8));
    for (int64_t a = 0; a < g.n_act; ++a)
      q5_0_offsets(g.act + uint64_t(a) * g.act_row_bytes, nb, offsets.data() + a * nb * 8);
    const uint8_t* first = g.w + uint64_t(g.row_begin) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(kHeadBytes), uint64_t(end - g.row_begin) * g.w_row_bytes);
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    for (int64_t r = g.row_begin; r < end; r += kGroup) {
      const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
      for (int64_t a0 = 0; a0 < g.n_act; a0 += kMaxActs) {
        const int ra = int(std::min<int64_t>(kMaxActs, g.n_act - a0));
        const uint8_t* x[kMaxActs];
        const int32_t* c[kMaxActs];
        float* out[kMaxActs];
        for (int a = 0; a < ra; ++a) {
          x[a] = g.act + uint64_t(a0 + a) * g.act_row_bytes;
          c[a] = offsets.data() + (a0 + a) * nb * 8;
          out[a] = g.out + (a0 + a) * g.out_stride + r;
        }
        kQ5_0[ra - 1](grp, nb, x, c, out, a0 == 0);
      }
    }
  }
  if (g.row_end > end) {
    GemmArgs rest = g;
    rest.row_begin = end > g.row_begin ? end : g.row_begin;
    rest.layout = 0;
    gemm_q5_0(rest);
  }
}

}  // namespace opal::cpu::avx2vnni
#endif  // x86
