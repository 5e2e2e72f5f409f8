// Decode of Q8_0, Q4_0 and Q5_0 weights repacked at load into row groups of
// 8 (kernels/repack.h, kLayoutRowGroups8), with AVX2.
//
// Layout per group of 8 rows and 32-element block: the 8 rows' f16 scales
// (one 16-byte load and one vcvtph2ps, where the plain layout's kernels gather
// them from 8 rows with pinsrw), then the 8 rows' quants (Q8_0: 8 x 32 bytes
// in row order; Q4_0: rows j and j + 4 in 32 bytes, the two 128-bit lanes of
// vector j; Q5_0: the qh words, then pieces of 4 bytes of the 8 rows, below).
// A group is one sequential stream of 8 * row_bytes, and the groups follow
// each other, so the whole slice of a thread is one stream. Every kernel
// requests a slice's first 16 KiB up front and, per block, the bytes 16 KiB
// on (kGroupPrefetch: Q4_0 and Q5_0 since stop 15, `packed-decode*/avx2/q4_0`
// 24-31 -> 36-39 GB/s at load 4.6-5; 1 and 4 KiB had measured slower than
// none at stop 13, 32 KiB measured below 16). Q8_0 did so from stop 14 to
// 26; since stop 27 its decode requests only the head (below).
//
// The arithmetic is the plain decode kernels' (legacy_avx2.cpp LegacyDecode
// for Q8_0: llama.cpp's 8-lane order per row; Q5_0: Q5_0Lanes' block-exact
// order where the lanes order is selected, since stop 25, LegacyDecode's
// otherwise; q4_0_avx2.cpp Q4_0Decode: the block-exact order), so the results
// are the same bits. Small
// batches (Q8_0 and Q5_0 up to 16 activation rows, Q4_0 up to 8, and up to
// the entry's packed_mid_act since stop 17) run each group against every
// activation row while the group is in L1 (Q4_0: 4 rows per pass, the nibbles
// split once). Rows past the last whole group are plain: the plain gemm takes them.
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2 {
namespace {

constexpr int64_t kGroup = 8;

// The software prefetch, 16 KiB along the stream, and the first 16 KiB of
// a slice requested up front (a matrix's first groups have no earlier step
// to prefetch them: at one thread every matmul of a short-row model such as
// Qwen3-0.6B starts cold). packed-decode-1024/avx2/q8_0 (CPU time, host load
// 7-10): none 25, head only 28.6, 16 KiB on only 31, both 29.7 GB/s; the
// plain kernel 21-30 in the same runs. (1 and 4 KiB on measured slower than
// none at stop 13.) Q4_0 (stop 15, load 4.6-5.2, two passes): none 24-31,
// 4 KiB 30-33, 8 KiB 26-37, 16 KiB 27-39, 32 KiB 28-37 GB/s. Since stops 27,
// 40 and 41 only batches of 4+ rows take either (wants_stream_prefetch, kernels_avx2.h); since stop 42 decode
// takes the 16 KiB prefetch where decode_prefetch() says so (every host but AMD's AVX-512 cores), never the head.
constexpr int64_t kGroupPrefetch = 16 * 1024, kHeadBytes = 16 * 1024;

// Which calls take them (avx2::wants_stream_prefetch, kernels_avx2.h), and why.
// Q8_0 decode streams without the 16 KiB prefetch (stop 27): with every
// other call of a decode taking it (the same tokens, so the same host
// minute), the calls without read faster on every matrix of Qwen3-0.6B and
// Llama-3.2-1B at one thread, 1.00-1.21x (Qwen3's FFN down, k = 3072, 1.21x;
// Llama-3.2-1B's, k = 8192, 1.16x; its tied output 1.09x; at two threads the
// same but for Qwen3's output, 1.07x with; docs/perf/cpu-round2d.md,
// "Stop 27, dq2"). The hardware prefetchers follow the one stream. Q4_0 decode since stop 40 (Zen 4, --isa avx2, tg64
// at one thread with and without alternated: Qwen3-0.6B Q4_0 1.01-1.07x, Llama-3.2-1B 1.05-1.12x;
// docs/perf/cpu-round2f.md); Q5_0 decode and batches of 2-3 rows since stop 41 (wants_stream_prefetch,
// kernels_avx2.h). The head request (kHeadBytes) goes with the stream's prefetch: since stop 41 a call without the one
// requests no head either (alternated token by token, every call without it read faster: SmolLM2-135M Q4_0 / Q8_0 tg
// at one thread 3-3.5 %, Q4_0 at two threads 8.6 %, Qwen3-0.6B 0.6-0.8 %; docs/perf/cpu-round2g.md). Since stop 42
// every host but AMD's AVX-512 cores prefetches the decode's stream (Zen 3: 1.15-1.24x at one thread) but requests no
// head (wants_head_request: level at one thread, 1.02-1.07x faster without at two).

// One group of 8 Q8_0 rows against one activation row (Q8_0 blocks).
void q8_0_group(const uint8_t* grp, int64_t nb, const uint8_t* x, float* out, bool prefetch) {
  constexpr int64_t kBlock = kGroup * kQ8_0Bytes;  // 272
  __m256 acc[kGroup];
  for (int i = 0; i < kGroup; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    const uint8_t* xb = x + b * kQ8_0Bytes;
    if (prefetch)
      for (int o = 0; o < kBlock; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(gb + kGroupPrefetch + o), _MM_HINT_T0);
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))),
                                   _mm256_set1_ps(load_f16(xb)));
    for (int i = 0; i < kGroup; ++i) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * i));
      const __m256i dot =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xq, q)), ones16());
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(i)), acc[i]);
    }
  }
  for (int i = 0; i < kGroup; ++i) out[i] = hsum8(acc[i]);
}

// A convert_q8_0_sums activation row's tail: block b's d as f32 (the f16's
// value, so the same product) and 8 * its sum of quants, each from one
// broadcast load instead of an f16 convert or a scalar multiply and a move
// to the vector side (stop 20: four fewer shuffle-port operations a block).
struct SumsTail {
  const uint8_t* d;
  const uint8_t* sums;
  SumsTail(const uint8_t* x, int64_t nb) : d(x + nb * kQ8_0Bytes), sums(d + nb * 4) {}
  __m256 scale(int64_t b) const {
    float v;
    std::memcpy(&v, d + 4 * b, 4);
    return _mm256_set1_ps(v);
  }
  __m256i offset8(int64_t b) const {
    int32_t v;
    std::memcpy(&v, sums + 4 * b, 4);
    return _mm256_slli_epi32(_mm256_set1_epi32(v), 3);
  }
};

// One group of 8 Q4_0 rows against one convert_q8_0_sums activation row.
void q4_0_group(const uint8_t* grp, int64_t nb, const uint8_t* x, float* out, bool prefetch) {
  constexpr int64_t kBlock = kGroup * kQ4_0Bytes;  // 144
  const SumsTail tail(x, nb);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    if (prefetch)
      for (int o = 0; o < kBlock; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(gb + kGroupPrefetch + o), _MM_HINT_T0);
    const uint8_t* xb = x + b * kQ8_0Bytes;
    const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 2)));
    const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 18)));
    __m256i v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * j));
    const __m256i u = _mm256_sub_epi32(q4_0_block_sums8(v, xlo, xhi), tail.offset8(b));
    const __m256 d =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))), tail.scale(b));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), d, acc);
  }
  _mm256_storeu_ps(out, acc);
}

// One group of 8 Q4_0 rows against RA activation rows (batches, stop 17): the
// nibbles split once per block (4 and, 4 shift, 4 and: about a third of
// q4_0_group's work per activation row), then per activation row
// q4_0_block_sums8's arithmetic on them: the same exact sums, the same FMA.
template <int RA>
void q4_0_group_rows(const uint8_t* grp, int64_t nb, const uint8_t* const* x, float* const* out, bool prefetch) {
  constexpr int64_t kBlock = kGroup * kQ4_0Bytes;  // 144
  const uint8_t* sums[RA];
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) {
    sums[a] = x[a] + nb * kQ8_0Bytes + nb * 4;
    acc[a] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    if (prefetch)
      for (int o = 0; o < kBlock; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(gb + kGroupPrefetch + o), _MM_HINT_T0);
    __m256i ql[4], qh[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * j));
      ql[j] = _mm256_and_si256(v, low4);
      qh[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    for (int a = 0; a < RA; ++a) {
      const uint8_t* xb = x[a] + b * kQ8_0Bytes;
      const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 2)));
      const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 18)));
      __m256i pj[4];  // q4_0_block_sums8's int16 tree (at most 4 * 7680 = 30720 a sum), one vpmaddwd
      for (int j = 0; j < 4; ++j)
        pj[j] = _mm256_add_epi16(_mm256_maddubs_epi16(ql[j], xlo), _mm256_maddubs_epi16(qh[j], xhi));
      const __m256i t0 = _mm256_add_epi16(_mm256_unpacklo_epi32(pj[0], pj[1]), _mm256_unpackhi_epi32(pj[0], pj[1]));
      const __m256i t1 = _mm256_add_epi16(_mm256_unpacklo_epi32(pj[2], pj[3]), _mm256_unpackhi_epi32(pj[2], pj[3]));
      __m256i u =
          _mm256_madd_epi16(_mm256_add_epi16(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1)), ones16());
      int32_t sum;
      std::memcpy(&sum, sums[a] + 4 * b, 4);
      u = _mm256_sub_epi32(u, _mm256_set1_epi32(8 * sum));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(load_f16(xb)));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), d, acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(out[a], acc[a]);
}

// The Q4_0 groups against every activation row, kQ4_0Acts at a time (the last 1-3 in one smaller step).
constexpr int kQ4_0Acts = 4;

template <int RA>
void q4_0_step(const GemmArgs& g, const uint8_t* grp, int64_t nb, int64_t r, int64_t a0) {
  const uint8_t* x[RA];
  float* out[RA];
  for (int a = 0; a < RA; ++a) {
    x[a] = g.act + uint64_t(a0 + a) * g.act_row_bytes;
    out[a] = g.out + (a0 + a) * g.out_stride + r;
  }
  q4_0_group_rows<RA>(grp, nb, x, out, a0 == 0);
}

void q4_0_group_acts(const GemmArgs& g, const uint8_t* grp, int64_t nb, int64_t r) {
  int64_t a = 0;
  for (; a + kQ4_0Acts <= g.n_act; a += kQ4_0Acts) q4_0_step<kQ4_0Acts>(g, grp, nb, r, a);
  switch (g.n_act - a) {
    case 3: q4_0_step<3>(g, grp, nb, r, a); break;
    case 2: q4_0_step<2>(g, grp, nb, r, a); break;
    case 1: q4_0_step<1>(g, grp, nb, r, a); break;
    default: break;
  }
}

using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t*, float*, bool);
using GroupActsFn = void (*)(const GemmArgs&, const uint8_t*, int64_t, int64_t);

// The thread's groups, each met by every activation row in turn; then the
// plain rows after the last whole group through the plain gemm.
// acts: a group against all activation rows at once (instead of group per row), where the kernel has one.
// stream_prefetch: the first activation row's pass over a group prefetches kGroupPrefetch on, and for batches
// (wants_head_request) the first kHeadBytes of the slice are requested before the first group.
void run_groups(const GemmArgs& g, GroupFn group, void (*plain)(const GemmArgs&), GroupActsFn acts,
                bool stream_prefetch) {
  if (g.row_begin % kGroup != 0) fail("row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  const int64_t nb = g.k / 32;
  const int64_t full = g.n_rows / kGroup * kGroup;
  const int64_t end = g.row_end < full ? g.row_end : full;
  if (end > g.row_begin && stream_prefetch && wants_head_request(g)) {
    const uint8_t* first = g.w + uint64_t(g.row_begin) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(kHeadBytes), uint64_t(end - g.row_begin) * g.w_row_bytes);
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
  }
  for (int64_t r = g.row_begin; r < end; r += kGroup) {
    const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
    if (acts && g.n_act > 1) {
      acts(g, grp, nb, r);
      continue;
    }
    for (int64_t a = 0; a < g.n_act; ++a)
      group(grp, nb, g.act + uint64_t(a) * g.act_row_bytes, g.out + a * g.out_stride + r, a == 0 && stream_prefetch);
  }
  if (g.row_end > end) {
    GemmArgs rest = g;
    rest.row_begin = end > g.row_begin ? end : g.row_begin;
    rest.layout = 0;
    plain(rest);
  }
}

// Q5_0 (stop 15): weight rows in the int32 lanes, as the K-quant groups; the
// kernels are q5_0_groups.h's (shared with avx2-vnni). Plain AVX2's lane sum:
// vpmaddubsw of the 8 rows' unsigned quants with the activation's 4 bytes
// (broadcast), vpmaddwd by ones, minus 16 * (x_4L + .. + x_4L+3).
__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
__m256i or_masked(__m256i a, __m256i b, __m256i mask) { return _mm256_or_si256(a, _mm256_and_si256(b, mask)); }

struct MaddQ5 {
  // c[8b + L] = 16 * (x_4L + .. + x_4L+3) over block b of a Q8_0 activation row.
  static void offsets(const uint8_t* x, int64_t nb, int32_t* c) {
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xq = load32(x + b * kQ8_0Bytes + 2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * b),
                          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), xq), ones16()));
    }
  }
  static __m256i lane(__m256i q, __m256i x4, int32_t c) {
    return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q, x4), ones16()), _mm256_set1_epi32(c));
  }
  // A block's exact sum in the block-exact order (q5_0_group_exact): piece T's
  // two int16 pair sums (lanes T and T + 4, at most 2 * 2 * 31 * 128 = 15872)
  // add in int16, two pieces to a chain (31744), each chain once through
  // vpmaddwd by ones, then the offset.
  struct Block {
    __m256i off, h[2];
    void start(__m256i offset) { off = offset; }
    template <int T>
    void add(__m256i q0, __m256i x0, __m256i q1, __m256i x1) {
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(q1, x1));
      h[T / 2] = T % 2 == 0 ? p : in_register(_mm256_add_epi16(h[T / 2], p));
    }
    __m256i sum() const {
      return _mm256_add_epi32(off,
                              _mm256_add_epi32(_mm256_madd_epi16(h[0], ones16()), _mm256_madd_epi16(h[1], ones16())));
    }
  };
};

constexpr int kQ5MaxActs = 3;
bool group_stream_prefetch(const GemmArgs& g) { return avx2::wants_stream_prefetch(g); }

#include "backends/cpu/kernels/x86_avx2/q5_0_groups.h"

// Piece T of a group's block unpacked into RowsInLanes' lanes T and T + 4 of the group's 8 rows (q5_0_groups_to_lanes).
template <int T>
void store_lanes(const uint8_t* gb, __m256i w, uint8_t* lanes, int slice) {
  __m256i q0, q1;
  q5_0_unpack<T>(gb, w, q0, q1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + T * slice * 4), q0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + (T + 4) * slice * 4), q1);
}

}  // namespace

void q5_0_groups_to_lanes(const GemmArgs& g, int64_t row, int rows, int slice, int block_bytes, uint8_t* packed) {
  if (row % kGroup != 0 || rows % kGroup != 0 || rows > slice || row + rows > g.n_rows / kGroup * kGroup)
    fail("Q5_0 row groups to lanes: rows [{}, {}) are not whole groups of a {}-row weight", row, row + rows, g.n_rows);
  const int64_t nb = g.k / 32;
  const int padded = (rows + 15) / 16 * 16;
  for (int q = 0; q < rows / kGroup; ++q) {
    const uint8_t* grp = g.w + uint64_t(row + kGroup * q) * g.w_row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* gb = grp + b * kQ5_0Group;
      uint8_t* pb = packed + b * block_bytes;
      _mm256_storeu_ps(reinterpret_cast<float*>(pb) + kGroup * q, q5_0_block_scales(gb, false));
      uint8_t* lanes = pb + slice * 4 + kGroup * q * 4;
      const __m256i w = load32(gb + 16);
      store_lanes<0>(gb, w, lanes, slice);
      store_lanes<1>(gb, w, lanes, slice);
      store_lanes<2>(gb, w, lanes, slice);
      store_lanes<3>(gb, w, lanes, slice);
    }
  }
  for (int64_t b = 0; b < nb && padded > rows; ++b) {  // the pad rows: zero scales and quants
    uint8_t* pb = packed + b * block_bytes;
    std::memset(pb + 4 * rows, 0, size_t(4 * (padded - rows)));
    for (int lane = 0; lane < 8; ++lane)
      std::memset(pb + slice * 4 + (lane * slice + rows) * 4, 0, size_t(4 * (padded - rows)));
  }
}

void gemm_q5_0_groups(const GemmArgs& g) { run_q5_0_groups<MaddQ5>(g, gemm_q5_0); }
void gemm_q8_0_groups(const GemmArgs& g) { run_groups(g, q8_0_group, gemm_q8_0, nullptr, wants_stream_prefetch(g)); }
void gemm_q4_0_groups(const GemmArgs& g) {
  run_groups(g, q4_0_group, gemm_q4_0, q4_0_group_acts, wants_stream_prefetch(g));
}
void gemm_q8_0_groups_vnni(const GemmArgs& g) {
  run_groups(g, q8_0_group, avx2vnni::gemm_q8_0, nullptr, wants_stream_prefetch(g));
}
void gemm_q4_0_groups_vnni(const GemmArgs& g) {
  run_groups(g, q4_0_group, avx2vnni::gemm_q4_0, q4_0_group_acts, wants_stream_prefetch(g));
}

}  // namespace opal::cpu::avx2
#endif  // x86
