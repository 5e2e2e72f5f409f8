// Decode and small batches (up to 16 activation rows; since stop 17 up to the
// entry's packed_mid_act where the batch order allows, ops/matmul.cpp) of Q8_0, Q4_0 and Q5_0
// weights repacked at load into row groups of 8 (kernels/repack.h,
// kLayoutRowGroups8), with AVX-512 VNNI.
//
// Layout per group of 8 rows and 32-element block: the 8 rows' f16 scales in
// row order (16 bytes: one load and one vcvtph2ps, where the plain kernels
// gather them from 8-16 rows), then the quants: Q8_0 8 x 32 bytes in row
// order, so rows 2j and 2j + 1 are one 64-byte load (the plain kernel's
// row-pair vector j); Q4_0 8 x 16 nibble bytes as rows 0, 4, 1, 5, 2, 6, 3, 7,
// so one 64-byte load holds four rows' nibbles, one row per 128-bit lane (the
// plain Q4_0Decode's vector form). A thread's slice is then one sequential
// stream that the hardware prefetchers track.
//
// The arithmetic is the plain kernels' (legacy_avx512.cpp):
// * Q8_0 (LegacyDecode): per (row, activation row) llama.cpp's 8-lane order:
//   vpdpbusd of the quants offset to unsigned (w xor 0x80) from -128 * x's
//   4-byte sums, converted, times d_w * d_x, one 8-lane FMA accumulator per
//   pair, two rows per 512-bit vector; summed horizontally at the end. For
//   decode and batches of up to 3 rows on groups of up to 48 KiB (stop 16;
//   longer ones since stop 27 as batches) the -128 * x sums are made
//   once per call (q8_0_starts), d_x is the f32 copy in the activation row's
//   tail (convert_q8_0_sums), and the 8 rows' horizontal sums run side by
//   side (hsum8_rows: hsum8's adds on the same operands) into one store.
// * Q4_0 (Q4_0Decode): the block-exact order, acc = fma(float(isum), d_w *
//   d_x, acc): low nibbles against the activation's first 16 bytes broadcast
//   to the four 128-bit lanes, high nibbles against its last 16, the lanes'
//   partial sums added exactly (unpack-add), -8 * sum(x) (the activation
//   row's block sum, convert_q8_0_sums; made once per call since stop 26)
//   the start of each row's lane, d_x the f32 copy in the row's tail. One group (8 rows) a
//   step, so the stream stays one: a step of two adjacent groups (16 rows,
//   all 16 lanes of the block sums used, as Q4_0Decode) follows two streams
//   and measured 20-29 GB/s against 29-38 for one (packed-decode*/avx512).
// So the results are the plain layout's bit for bit. Rows past the last whole
// group are plain: the plain gemm takes them.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "core/error.h"

namespace opal::cpu::avx512 {
namespace {

constexpr int64_t kGroup = 8;
constexpr int kActStep = 4;  // activation rows met by one step of weight rows

float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Batches stream without software prefetch, and so does decode on AMD's AVX-512 cores: Q8_0 since stops 14 and 16
// (the same with and without at load 8); Q4_0 since stop 40 (a 16 KiB distance had measured 33-37 GB/s against
// 28-31 without on a loaded host at stop 16; on the Zen 4 host of stops 37-40 none reads
// packed-decode*/avx512/q4_0 1.1-1.4x and Qwen3 / Llama-3.2-1B Q4_0 tg at one thread 1.0-1.16x,
// docs/perf/cpu-round2f.md), as the K-quant groups (stop 37) and Q5_0 (stop 40): Zen 4's hardware prefetchers
// track one sequential stream. Intel's do not keep up: decode prefetches where decode_prefetch() says so
// (below). Groups longer than kLongGroupBytes (rows of
// k > 5782: Llama-3.2-1B's FFN down, k = 8192, 68 KiB a group) go through
// q8_0_group_batch even for decode (stop 27): its lane starts and scales are
// made in registers, so only the activation row (8.5 KiB at k = 8192) has to
// stay in L1 between groups, not also the per-call starts and f32 scales (9
// KiB more). Every other call of a decode in that form read 1.07-1.09x the
// stop 26 form (q8_0_group with a 16 KiB prefetch on long groups, which had
// read 1.17-1.22x itself without one), in the same tokens
// (docs/perf/cpu-round2d.md "Stop 27, dq2"); a prefetch on top of the new form measured 1.01-1.02x
// of the stop 26 form, so it has none.
constexpr int64_t kLongGroupBytes = 48 * 1024;
// No request of a slice's first bytes up front either (stop 41): the 16 KiB burst of prefetches before the first
// group held the core until most of it had arrived, and every call with it, alternated token by token against
// every call without, read slower: SmolLM2-135M Q4_0 / Q8_0 tg at one thread 2-3 %, at two threads 4-7 %, the
// larger models 0-1.5 % (docs/perf/cpu-round2g.md). The q5_0_groups.h kernels request none where kGroupPrefetch is 0.
constexpr int64_t kHeadBytes = 0;

// Decode's software prefetch along the stream where decode_prefetch() says so (matmul_kernels.h: every host but
// AMD's AVX-512 Zen 4 / Zen 5): calls of 1-3 activation rows request the bytes kGroupPrefetch ahead of each block
// into L1 (Q8_0, Q4_0 and Q5_0). Batches never do (above). On an Intel Xeon with AVX-512 (stop 43, token by token
// in one process, docs/perf/cpu-round2g.md) the model's decode ran 1.20-1.32x faster with it at one thread, 8 KiB
// 1-1.5 % ahead of 16 KiB on the three models timed, 4 KiB level with 8, 32 KiB 4-10 % behind 16.
constexpr int64_t kGroupPrefetch = 8 * 1024;
// (Q5_0 reads it as q5_0_groups.h's group_stream_prefetch.)
bool group_stream_prefetch(const GemmArgs& g) { return g.n_act < kActStep && decode_prefetch(); }
void prefetch_ahead(const uint8_t* block, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + kGroupPrefetch + o), _MM_HINT_T0);
}

// What a step needs of the call: the weights, the activation rows, the output.
struct Step {
  const GemmArgs& g;
  int64_t nb;
  const uint8_t* x(int64_t a) const { return g.act + uint64_t(a) * g.act_row_bytes; }
  float* out(int64_t a) const { return g.out + a * g.out_stride; }
};

// Per call and activation row, block b: the 8 int32 lanes' start -128 * (x_4L + .. + x_4L+3), L = 0..7 (the
// weights are offset to unsigned, w xor 0x80 = w + 128, so vpdpbusd from this start gives the exact sum of w * x
// over the lane's 4 elements). Computed once per call instead of once per group and block.
void q8_0_starts(const uint8_t* x, int64_t nb, int32_t* c) {
  const __m256i offset = _mm256_set1_epi8(char(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kQ8_0Bytes + 2));
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, xq);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * b), _mm256_sub_epi32(_mm256_setzero_si256(), s));
  }
}

// hsum8 of the 8 rows at once: acc[j] holds row 2j's 8 lanes in its lower half and row 2j + 1's in its upper.
// Per row the same adds on the same operands as hsum8 (v0..3 + v4..7, then lanes 0 + 2 and 1 + 3, then
// their sum), so the same bits; one store of the 8 rows instead of 8 horizontal sums.
// The four vectors are passed by value: an array argument made GCC keep the live accumulators on the stack,
// storing them on every block (docs/cpu-decode.md, "Register tiles and GCC 12").
__m256 hsum8_rows(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // 128-bit lanes: a_j = [2j: v0..3, 2j: v4..7, 2j+1: v0..3, 2j+1: v4..7].
  const __m512 lo01 = _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));  // rows 0, 1, 2, 3: v0..3
  const __m512 hi01 = _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));  // rows 0..3: v4..7
  const __m512 lo23 = _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 hi23 = _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 1, 3, 1));
  __m512 s[2] = {_mm512_add_ps(lo01, hi01), _mm512_add_ps(lo23, hi23)};  // per row [s0, s1, s2, s3]
  for (auto& v : s) {
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(3, 2, 3, 2)));  // lane 0: s0 + s2, lane 1: s1 + s3
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 1, 1, 1)));  // lane 0: (s0 + s2) + (s1 + s3)
  }
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutex2var_ps(s[0], pick, s[1]));
}

// One group of 8 Q8_0 rows (row r on) against activation rows [act, act + RA); c: the rows' lane starts
// (q8_0_starts, nb * 8 each).
template <int RA, bool kPrefetch>
void q8_0_group(const Step& s, const uint8_t* grp, int64_t r, int64_t act, const int32_t* c) {
  constexpr int64_t kBlock = kGroup * kQ8_0Bytes;  // 272
  const uint8_t* x[RA];
  const float* dx[RA];
  const int32_t* cx[RA];
  for (int a = 0; a < RA; ++a) {
    x[a] = s.x(act + a);
    dx[a] = reinterpret_cast<const float*>(x[a] + s.nb * kQ8_0Bytes);  // convert_q8_0_sums: the block scales as f32
    cx[a] = c + (act + a) * s.nb * 8;
  }
  __m512 acc[4][RA];
  __m512i spread[4];
  for (int j = 0; j < 4; ++j) {
    for (int a = 0; a < RA; ++a) acc[j][a] = _mm512_setzero_ps();
    spread[j] = _mm512_set_epi32(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j);
  }
  const __m512i offset = _mm512_set1_epi8(char(0x80));
  for (int64_t b = 0; b < s.nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    if constexpr (kPrefetch) prefetch_ahead(gb, kBlock);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    __m512i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm512_xor_si512(_mm512_loadu_si512(gb + 16 + 64 * j), offset);
    for (int a = 0; a < RA; ++a) {
      const __m512i xq =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[a] + b * kQ8_0Bytes + 2)));
      const __m512i start = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cx[a] + 8 * b)));
      const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_broadcast_ss(dx[a] + b)));
      for (int j = 0; j < 4; ++j)
        acc[j][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[j], xq)),
                                    _mm512_permutexvar_ps(spread[j], d), acc[j][a]);
    }
  }
  for (int a = 0; a < RA; ++a)
    _mm256_storeu_ps(s.out(act + a) + r, hsum8_rows(acc[0][a], acc[1][a], acc[2][a], acc[3][a]));
}

// Batches of 4 activation rows or more (kActStep at a time): the stop 14 form, each row's lane starts and
// scale made per block in registers. With 16 accumulators live, the per-call starts and f32 scales read
// from memory (q8_0_group) measured slower (packed-batch8 / batch16 9.8-11.3 / 5.0-5.2 against 7.0-9.1 /
// 4.2-4.5 GB/s); decode and batches of up to 3 rows take q8_0_group, but on groups longer than
// kLongGroupBytes this form (stop 27, above). The same lane starts, the same d_w * d_x (the f16's value),
// hsum8 per row: q8_0_group's bits.
template <int RA, bool kPrefetch>
void q8_0_group_batch(const Step& s, const uint8_t* grp, int64_t r, int64_t act) {
  constexpr int64_t kBlock = kGroup * kQ8_0Bytes;  // 272
  const uint8_t* x[RA];
  for (int a = 0; a < RA; ++a) x[a] = s.x(act + a);
  __m512 acc[4][RA];
  __m512i spread[4];
  for (int j = 0; j < 4; ++j) {
    for (int a = 0; a < RA; ++a) acc[j][a] = _mm512_setzero_ps();
    spread[j] = _mm512_set_epi32(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j);
  }
  const __m512i offset = _mm512_set1_epi8(char(0x80));
  for (int64_t b = 0; b < s.nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    if constexpr (kPrefetch) prefetch_ahead(gb, kBlock);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    __m512i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm512_xor_si512(_mm512_loadu_si512(gb + 16 + 64 * j), offset);
    for (int a = 0; a < RA; ++a) {
      const uint8_t* xb = x[a] + b * kQ8_0Bytes;
      const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)));
      const __m512i neg =
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xq));
      const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_set1_ps(load_f16(xb))));
      for (int j = 0; j < 4; ++j)
        acc[j][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(neg, q[j], xq)),
                                    _mm512_permutexvar_ps(spread[j], d), acc[j][a]);
    }
  }
  for (int a = 0; a < RA; ++a) {
    float* out = s.out(act + a);
    for (int j = 0; j < 4; ++j) {
      out[r + 2 * j] = hsum8(_mm512_castps512_ps256(acc[j][a]));
      out[r + 2 * j + 1] = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j][a]), 1)));
    }
  }
}

// Per call and activation row, block b: -8 * (the block's sum of quants), from the convert_q8_0_sums tail
// (stop 26): the Q4_0 groups start each row's exact sum there instead of subtracting it per block.
void q4_0_starts(const uint8_t* x, int64_t nb, int32_t* c) {
  const uint8_t* sums = x + uint64_t(nb) * (kQ8_0Bytes + 4);
  for (int64_t b = 0; b < nb; ++b) c[b] = -8 * load_i32(sums + 4 * b);
}

// One Q4_0 group (8 rows) against activation rows [act, act + RA): the two
// vectors' lanes summed to [A, B, A, B] per 128-bit lane (A: vector 0's row,
// B: vector 1's), then the 8 sums gathered in row order into 256 bits.
// c: the rows' starts (q4_0_starts, nb each). Each 128-bit lane holds one
// row's partial sums, so the -8 * sum(x) offset starts dword 0 of every lane
// (a zero-masked broadcast load) and is counted once a row: the same exact
// int32 as subtracting it from the row's sum. d_x is the f32 copy in the
// activation row's tail (one broadcast load, not an f16 insert and convert).
template <int RA, bool kPrefetch>
void q4_0_group(const Step& s, const uint8_t* grp, int64_t r, int64_t act, const int32_t* c) {
  constexpr int64_t kBlock = kGroup * kQ4_0Bytes;
  const uint8_t* x[RA];
  const float* dx[RA];
  const int32_t* cx[RA];
  for (int a = 0; a < RA; ++a) {
    x[a] = s.x(act + a);
    dx[a] = reinterpret_cast<const float*>(x[a] + s.nb * kQ8_0Bytes);  // convert_q8_0_sums: the block scales as f32
    cx[a] = c + (act + a) * s.nb;
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // Row i's sum is at lane row_order[i] of u (rows 0, 4, 1, 5 in vector 0's lanes; 2, 6, 3, 7 in vector 1's).
  const __m512i row_order = _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  __m256 acc[RA];
  for (int a = 0; a < RA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < s.nb; ++b) {
    const uint8_t* gb = grp + b * kBlock;
    if constexpr (kPrefetch) prefetch_ahead(gb, kBlock);
    __m512i lo[2], hi[2];
    for (int v = 0; v < 2; ++v) {
      const __m512i q = _mm512_loadu_si512(gb + 16 + 64 * v);
      lo[v] = _mm512_and_si512(q, low4);
      hi[v] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    for (int a = 0; a < RA; ++a) {
      const uint8_t* xb = x[a] + b * kQ8_0Bytes;
      const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 2)));
      const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 18)));
      const __m512i start = _mm512_maskz_set1_epi32(__mmask16(0x1111), cx[a][b]);
      __m512i sv[2];
      for (int v = 0; v < 2; ++v) sv[v] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo[v], xlo), hi[v], xhi);
      const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(sv[0], sv[1]), _mm512_unpackhi_epi32(sv[0], sv[1]));
      const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
      const __m256i sums = _mm512_castsi512_si256(_mm512_permutexvar_epi32(row_order, u));
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx[a] + b));
      acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc[a]);
    }
  }
  for (int a = 0; a < RA; ++a) _mm256_storeu_ps(s.out(act + a) + r, acc[a]);
}

// The end of the slice's whole groups [row_begin, end).
int64_t groups_end(const GemmArgs& g) {
  if (g.row_begin % kGroup != 0) fail("row-group gemm: slice starts at row {}, not a group boundary", g.row_begin);
  const int64_t full = g.n_rows / kGroup * kGroup;
  return g.row_end < full ? g.row_end : full;
}

void plain_rest(const GemmArgs& g, int64_t end, void (*plain)(const GemmArgs&)) {
  if (g.row_end <= end) return;
  GemmArgs rest = g;
  rest.row_begin = end > g.row_begin ? end : g.row_begin;
  rest.layout = 0;
  plain(rest);
}

// The slice's whole groups [row_begin, end) against every activation row, kActStep rows at a time and the rest
// (1-3) in one smaller step: group(std::integral_constant<int, RA>{}, pf, grp, r, a), where pf is
// std::bool_constant<group_stream_prefetch(g)>.
template <class Group, class Prefetch>
void each_group(const GemmArgs& g, int64_t end, Prefetch pf, Group group) {
  for (int64_t r = g.row_begin; r < end; r += kGroup) {
    const uint8_t* grp = g.w + uint64_t(r) * g.w_row_bytes;
    int64_t a = 0;
    for (; a + kActStep <= g.n_act; a += kActStep) group(std::integral_constant<int, kActStep>{}, pf, grp, r, a);
    switch (g.n_act - a) {
      case 3: group(std::integral_constant<int, 3>{}, pf, grp, r, a); break;
      case 2: group(std::integral_constant<int, 2>{}, pf, grp, r, a); break;
      case 1: group(std::integral_constant<int, 1>{}, pf, grp, r, a); break;
      default: break;
    }
  }
}
template <class Group>
void each_group(const GemmArgs& g, int64_t end, Group group) {
  if (group_stream_prefetch(g)) each_group(g, end, std::true_type{}, group);
  else each_group(g, end, std::false_type{}, group);
}

// Q5_0 (stop 40): kernels/repack.h's kLayoutQ5Groups8 and x86_avx2/q5_0_groups.h's kernels (the layout, both
// orders and why they give the plain kernels' bits are written there), with AVX-512 VL's 256-bit vpdpbusd as
// avx2-vnni's AVX-VNNI one, vpternlogd for the unpack's or of masked bits, 4 activation rows a group (32 vector
// registers) and, but for decode where decode_prefetch() says so, no software prefetch along the stream (Zen 4's
// hardware prefetchers do better: docs/cpu-decode.md "AVX-512 Q5_0 on kLayoutQ5Groups8"). 256 bits, not 512: Zen 4 runs
// a 512-bit operation as two 256-bit halves, so the work per row is the same, and a piece's lanes T and T + 4 meet
// their activation bytes by broadcast, where the zmm kernel on kLayoutRowGroups8 it replaces (stop 15) took a vpermd of
// the activation for every piece and activation row (ceiling-1024/avx512/q5_0 23.5 GB/s; 43 now). Q5_0's stream
// prefetch: decode's, as the Q8_0 / Q4_0 groups' above (group_stream_prefetch).

__m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i bcast4(const uint8_t* p) { return _mm256_set1_epi32(load_i32(p)); }
// a | (b & mask), one vpternlogd.
__m256i or_masked(__m256i a, __m256i b, __m256i mask) { return _mm256_ternarylogic_epi32(a, b, mask, 0xF8); }

// AVX-512 VL's 256-bit vpdpbusd (q5_0_groups.h's VnniQ5).
struct Avx512Dpbusd {
  static __m256i apply(__m256i acc, __m256i u, __m256i v) { return _mm256_dpbusd_epi32(acc, u, v); }
};

constexpr int kQ5MaxActs = 4;

#include "backends/cpu/kernels/x86_avx2/q5_0_groups.h"

}  // namespace

void gemm_q5_0_groups(const GemmArgs& g) { run_q5_0_groups<VnniQ5<Avx512Dpbusd>>(g, gemm_q5_0); }

void gemm_q8_0_groups(const GemmArgs& g) {
  const int64_t end = groups_end(g);
  const Step s{g, g.k / 32};
  const bool long_groups = int64_t(kGroup) * int64_t(g.w_row_bytes) > kLongGroupBytes;
  // Batches, and any call on long groups: kActStep rows at a time, the rest (1-3) in one smaller step.
  if (g.n_act >= kActStep || long_groups) {
    each_group(g, end, [&](auto ra, auto pf, const uint8_t* grp, int64_t r, int64_t a) {
      q8_0_group_batch<decltype(ra)::value, decltype(pf)::value>(s, grp, r, a);
    });
  } else if (end > g.row_begin) {  // decode and batches of 2-3 rows
    thread_local std::vector<int32_t> starts;
    starts.resize(size_t(g.n_act * s.nb * 8));
    for (int64_t a = 0; a < g.n_act; ++a) q8_0_starts(s.x(a), s.nb, starts.data() + a * s.nb * 8);
    const int32_t* c = starts.data();
    each_group(g, end, [&](auto ra, auto pf, const uint8_t* grp, int64_t r, int64_t a) {
      q8_0_group<decltype(ra)::value, decltype(pf)::value>(s, grp, r, a, c);
    });
  }
  plain_rest(g, end, gemm_q8_0);
}

void gemm_q4_0_groups(const GemmArgs& g) {
  const int64_t end = groups_end(g);
  const Step s{g, g.k / 32};
  if (end > g.row_begin) {
    thread_local std::vector<int32_t> starts;
    starts.resize(size_t(g.n_act * s.nb));
    for (int64_t a = 0; a < g.n_act; ++a) q4_0_starts(s.x(a), s.nb, starts.data() + a * s.nb);
    const int32_t* c = starts.data();
    each_group(g, end, [&](auto ra, auto pf, const uint8_t* grp, int64_t r, int64_t a) {
      q4_0_group<decltype(ra)::value, decltype(pf)::value>(s, grp, r, a, c);
    });
  }
  plain_rest(g, end, gemm_q4_0);
}

}  // namespace opal::cpu::avx512
#endif  // x86
