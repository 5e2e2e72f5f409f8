// f16 KV-cache dot products and axpy for attention with AVX2 + F16C, in
// llama.cpp's AVX-512 summation orders (kernels/llama_order.h): each
// 16-lane accumulator is a pair of 8-lane registers (lanes 0-7, 8-15), and the
// final reduction follows reduce_add16 exactly, so results equal the AVX-512
// and scalar forms bit for bit.
// The block helpers (ops/attention.cpp's attention_blocks) work on K/V rows
// widened to f32 once for a block of query rows: dots in 4-cell x 2-query
// tiles (the lanes 0-7 halves of the eight 16-lane accumulators first, then
// the lanes 8-15 halves, then eight reduce_add16 trees side by side) or, for
// dk <= 64, over K transposed per 16 cells (6 queries x 16 cells lane by lane,
// the lanes' sums through an L1 buffer into reduce_add16's tree), and the
// V rows accumulated lane by lane (accumulate_f16: four lanes side by side,
// 3 x 8 columns each, so four consecutive cells' rows are read together; the
// same FMAs per lane in order) or, in the block path, with up to 3 queries x 32 elements in
// registers; the decode's accumulate_f16_heads takes the query heads of one kv head with the
// cells in order (accumulate_rows: up to 64 columns of a V row widened once, each head's lane
// accumulators loaded, FMA'd for four cells of the lane and stored, the next 256 cells' rows
// prefetched into L1 for rows up to 1 KiB apart, else into L2), and its dots_f16_heads at dk 64 widens a K row
// once for every head (dots_heads64: each 8-lane accumulator of ggml_vec_dot_f16's one step is
// a single product, taken by vmulps; at dk 128, dots_heads128, the accumulators one at a time, each one's two K
// vectors widened once for two or three heads), both reading the rows in address order with a
// software prefetch (dots_groups64: a one-thread decode's kv heads of a row at once, up to 32 heads, each K row
// read whole); off AMD's cores (kAttnKernelsPrefetch) accumulate_f16_groups takes a token's kv heads of a V row at
// once too (each lane step's four cells through every kv head's tiles, no software prefetch);
// for long chunks (attend_v_lanes16_cells) p is first rounded into a
// lane-major copy (round_p_lanes, 8 x 8 transposes) and each lane's rows stay in
// L1 while 6-query x 16-column tiles pass over them (15 of the 16 ymm registers).
// Where GCC 12 folded a vector load into each FMA that uses it, an empty asm
// keeps the vector in a register. The softmax exponential is llama_order::expf_avx512 on 8 lanes,
// vscalefps replaced by scale_pow2's two exact multiplications.
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2 {
namespace {

__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// reduce_add16 of the 16 lanes (lo = lanes 0-7, hi = lanes 8-15).
float reduce16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);                                         // t[i] = a[i] + a[i+8]
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // u[i] = t[i] + t[i+4]
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));                                         // u0+u2, u1+u3
  u = _mm_add_ss(u, _mm_movehdup_ps(u));
  return _mm_cvtss_f32(u);
}

float dot_f16_lanes16(const uint16_t* k, const float* q, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    lo = _mm256_fmadd_ps(load8(k + i), _mm256_loadu_ps(q + i), lo);
    hi = _mm256_fmadd_ps(load8(k + i + 8), _mm256_loadu_ps(q + i + 8), hi);
  }
  return reduce16(lo, hi);
}

float dot_f16_vec(const uint16_t* k, const float* q, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  __m256 a[8];
  for (auto& r : a) r = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(load8(k + i + 8 * j), _mm256_loadu_ps(q + i + 8 * j), a[j]);
  // 16-lane accumulator j is (a[2j], a[2j+1]); combine (0 + 2) + (1 + 3).
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
  double s = reduce16(lo, hi);
  for (int64_t i = np; i < n; ++i) s += double(_cvtsh_ss(k[i]) * q[i]);
  return float(s);
}

void axpy_f16(float p, const uint16_t* v, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load8(v + i), pv, _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] = std::fma(_cvtsh_ss(v[i]), p, acc[i]);
}

// reduce_add16 of eight 16-lane accumulators after its first step (t[c] = lanes 0-7 + lanes 8-15 of
// accumulator c), the rest of its tree at once; result lane c is accumulator c's sum.
__m256 reduce8x8(const __m256* t) {
  __m256 u[4];
  for (int p = 0; p < 4; ++p)  // u of t[2p] in the low 128 bits, of t[2p + 1] in the high
    u[p] = _mm256_add_ps(_mm256_permute2f128_ps(t[2 * p], t[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(t[2 * p], t[2 * p + 1], 0x31));
  // per 128 bits: [u0 + u2, u1 + u3] of one accumulator, then of another
  const __m256 v0 = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 v1 = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // lanes: 0 2 4 6 | 1 3 5 7
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// reduce_add16 of eight 16-lane accumulators (lo[c]: lanes 0-7, hi[c]: lanes
// 8-15) at once, in its exact order; result lane c is accumulator c's sum.
__m256 reduce16x8(const __m256* lo, const __m256* hi) {
  __m256 t[8];
  for (int c = 0; c < 8; ++c) t[c] = _mm256_add_ps(lo[c], hi[c]);  // t[i] = a[i] + a[i + 8]
  return reduce8x8(t);
}

// Four cells at a time (8 accumulators: lanes 0-7 and 8-15 of four 16-lane
// ones); each cell's arithmetic is dot_f16_lanes16's. In ggml_vec_dot_f16
// order (decode) eight cells at a time, their reductions side by side.
void dots_f16(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t dk,
              bool lanes16, float* out) {
  auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r]) * k_stride); };
  int64_t r = 0;
  if (lanes16)
    for (; r + 4 <= n; r += 4) {
      const uint16_t *k0 = row(r), *k1 = row(r + 1), *k2 = row(r + 2), *k3 = row(r + 3);
      __m256 a[8];
      for (auto& x : a) x = _mm256_setzero_ps();
      for (int64_t i = 0; i < dk; i += 16)
        for (int h = 0; h < 2; ++h) {
          const __m256 qv = _mm256_loadu_ps(q + i + 8 * h);
          a[h] = _mm256_fmadd_ps(load8(k0 + i + 8 * h), qv, a[h]);
          a[2 + h] = _mm256_fmadd_ps(load8(k1 + i + 8 * h), qv, a[2 + h]);
          a[4 + h] = _mm256_fmadd_ps(load8(k2 + i + 8 * h), qv, a[4 + h]);
          a[6 + h] = _mm256_fmadd_ps(load8(k3 + i + 8 * h), qv, a[6 + h]);
        }
      for (int c = 0; c < 4; ++c) out[r + c] = reduce16(a[2 * c], a[2 * c + 1]);
    }
  // ggml_vec_dot_f16 order without a tail (dk % 64 == 0, so the double sum is the float one): each cell's eight
  // accumulators combined (a0 + a2) + (a1 + a3) per 16-lane half, and eight cells reduced at once by reduce16x8.
  if (!lanes16 && dk % 64 == 0)
    for (; r + 8 <= n; r += 8) {
      __m256 lo[8], hi[8];
      for (int c = 0; c < 8; ++c) {
        const uint16_t* kr = row(r + c);
        __m256 a[8];
        for (auto& x : a) x = _mm256_setzero_ps();
        for (int64_t i = 0; i < dk; i += 64)
          for (int j = 0; j < 8; ++j)
            a[j] = _mm256_fmadd_ps(load8(kr + i + 8 * j), _mm256_loadu_ps(q + i + 8 * j), a[j]);
        lo[c] = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
        hi[c] = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
      }
      _mm256_storeu_ps(out + r, reduce16x8(lo, hi));
    }
  for (; r < n; ++r) out[r] = lanes16 ? dot_f16_lanes16(row(r), q, dk) : dot_f16_vec(row(r), q, dk);
}

// Rows a software prefetch runs ahead of the decode's in-order walks over K (dots_heads64, dots_heads128; V's
// accumulate_rows until stop 28): one row's two lines per cell 384 bytes apart (SmolLM2) kept too few loads in flight
// from L3 or DRAM (64: the same within noise at stop 28).
constexpr int64_t kRowsAhead = 32;

// The 64-byte lines of the bytes [off, off + len) of the row of cell cells[r], requested into L1 (kHint
// _MM_HINT_T0) or L2 (_MM_HINT_T1).
template <_mm_hint kHint = _MM_HINT_T0>
void prefetch_row(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t r, int64_t off, int64_t len) {
  const char* a = reinterpret_cast<const char*>(base + uint64_t(cells[r]) * stride) + off;
  for (int64_t b = 0; b < len; b += 64) _mm_prefetch(a + b, kHint);
}

// The last step of dots_heads64 / dots_heads128 for 8 cells (nc <= 8 of them real): t holds m heads' 8 x 8 first
// tree sums (head h at t + 64 h), one reduce8x8 per head finishes the 8 cells' trees side by side, and the nc
// scores go to out + h * ldo. kPlusZero (dots_heads64's products by vmulps): each score + (+0), which turns a -0
// into the +0 that FMAs from +0 give (see dots_heads64) and leaves every other value as it is.
template <bool kPlusZero = false>
void finish_heads_cells(const float* t, int64_t m, int64_t nc, float* out, int64_t ldo) {
  for (int64_t h = 0; h < m; ++h) {
    __m256 res = reduce8x8(reinterpret_cast<const __m256*>(t + 64 * h));  // lanes past nc: dropped
    if (kPlusZero) res = _mm256_add_ps(res, _mm256_setzero_ps());
    if (nc == 8) {
      _mm256_storeu_ps(out + h * ldo, res);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, res);
      std::copy(tmp, tmp + nc, out + h * ldo);
    }
  }
}

// The decode's dots for the query heads of one kv head at dk 64 in ggml_vec_dot_f16's order: one step of 64, so
// each of its eight 8-lane accumulators is a single product (an FMA from +0) and a cell's dot is
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) before reduce_add16's 8-lane tree (dot_f16_vec without a tail).
// A cell's K row is widened once into 8 registers and meets every head's q (read from L1 by the products); each
// head's first tree sum goes to t, and every 8 cells one reduce8x8 per head finishes their trees side by side.
// The products are vmulps (non-destructive, so no register copy per product; 12-16 % faster than the FMAs from +0
// at stop 28): a product equals the FMA's except that an exact zero product can be -0 where the FMA gives +0;
// sums of such zeros alone can then be -0, every other sum is the same, so + (+0) on the score (finish_heads_cells)
// gives the FMA form's bits (one exception: where every product is a negative underflow the FMA form's score is
// -0 and this one's +0; a score of +-0 gives the same probabilities either way).
constexpr int64_t kHeads64Max = 8;  // heads per pass over the cells (t: 2 KiB)
// H > 0: H heads, the head loop unrolled (SmolLM2's 3, Llama-3.2-1B's 4); H == 0: m heads (m <= kHeads64Max).
template <int H>
void dots_heads64(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t ldq,
                  int64_t m, float* out, int64_t ldo) {
  const int64_t heads = H > 0 ? H : m;
  alignas(32) float t[H > 0 ? H : kHeads64Max][8][8] = {};
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t nc = n - r0 < 8 ? n - r0 : 8;
    for (int64_t c = 0; c < nc; ++c) {
      if (r0 + c + kRowsAhead < n) prefetch_row(k, k_stride, cells, r0 + c + kRowsAhead, 0, 128);
      const uint16_t* kr = reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r0 + c]) * k_stride);
      __m256 x[8];
      for (int j = 0; j < 8; ++j) x[j] = load8(kr + 8 * j);
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + h * ldq;
        auto prod = [&](int j) { return _mm256_mul_ps(x[j], _mm256_loadu_ps(qh + 8 * j)); };
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(prod(0), prod(4)), _mm256_add_ps(prod(2), prod(6)));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(prod(1), prod(5)), _mm256_add_ps(prod(3), prod(7)));
        _mm256_store_ps(t[h][c], _mm256_add_ps(lo, hi));
      }
    }
    finish_heads_cells<true>(&t[0][0][0], heads, nc, out + r0, ldo);
  }
}

// dots_heads64 for the G kv heads of a row at once (SmolLM2's 3 x 3 heads): per cell, each kv head's 128-byte K
// slice (group_bytes apart) is widened and meets its H heads' q (head g * H + h at q + (g * H + h) * ldq), so each
// (head, cell) dot has dots_heads64's arithmetic; the rows are read once, whole and in address order (one stream of
// G x 128 bytes a cell instead of G passes over 128-byte slices, each a third of every row's lines: from DRAM the
// strided passes reached ~13 GB/s against a stream's ~22 GB/s, bench_attn_decode's probe/4k). The whole row's
// lines are prefetched about kGroupsAheadBytes on (kRowsAhead rows of SmolLM2's 384-byte rows; 12 of Llama-3.2-1B's
// 1 KiB rows, whose 32 rows ahead would fill most of L1 beside t and the q rows).
constexpr int64_t kGroupsMaxHeads = 32;  // G x H <= this (t: 8 KiB; Llama-3.2-1B's 8 x 4 heads)
constexpr int64_t kGroupsAheadBytes = kRowsAhead * 384;
template <int H>
void dots_groups64(const uint8_t* k, uint64_t k_stride, uint64_t group_bytes, const int32_t* cells, int64_t n,
                   const float* q, int64_t ldq, int64_t groups, float* out, int64_t ldo) {
  alignas(32) float t[kGroupsMaxHeads][8][8] = {};
  const int64_t heads = groups * H, row_bytes = int64_t(group_bytes) * (groups - 1) + 128;
  const int64_t ahead = std::clamp<int64_t>(kGroupsAheadBytes / row_bytes, 8, kRowsAhead);
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t nc = n - r0 < 8 ? n - r0 : 8;
    for (int64_t c = 0; c < nc; ++c) {
      if (r0 + c + ahead < n) prefetch_row(k, k_stride, cells, r0 + c + ahead, 0, row_bytes);
      const uint8_t* row = k + uint64_t(cells[r0 + c]) * k_stride;
      for (int64_t g = 0; g < groups; ++g) {
        const uint16_t* kr = reinterpret_cast<const uint16_t*>(row + g * group_bytes);
        __m256 x[8];
        for (int j = 0; j < 8; ++j) x[j] = load8(kr + 8 * j);
        for (int h = 0; h < H; ++h) {
          const float* qh = q + (g * H + h) * ldq;
          auto prod = [&](int j) { return _mm256_mul_ps(x[j], _mm256_loadu_ps(qh + 8 * j)); };
          const __m256 lo = _mm256_add_ps(_mm256_add_ps(prod(0), prod(4)), _mm256_add_ps(prod(2), prod(6)));
          const __m256 hi = _mm256_add_ps(_mm256_add_ps(prod(1), prod(5)), _mm256_add_ps(prod(3), prod(7)));
          _mm256_store_ps(t[g * H + h][c], _mm256_add_ps(lo, hi));
        }
      }
    }
    finish_heads_cells<true>(&t[0][0][0], heads, nc, out + r0, ldo);
  }
}

// The same at dk 128 (Qwen3) for H heads: two steps of 64, so each 8-lane accumulator a_j is
// fma(k[64 + 8j], q[64 + 8j], fma(k[8j], q[8j], +0)). The accumulators are taken one at a time in the order the
// combination ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) consumes them, each one's two K vectors (the row's
// halves) widened once for the H heads, so a head holds at most three partial sums (3 H + 2 of the 16 registers;
// the whole row widened would need 16) and the q vectors come from L1.
template <int H>
void dots_heads128(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t ldq,
                   float* out, int64_t ldo) {
  alignas(32) float t[H][8][8] = {};
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t nc = n - r0 < 8 ? n - r0 : 8;
    for (int64_t c = 0; c < nc; ++c) {
      if (r0 + c + kRowsAhead < n) prefetch_row(k, k_stride, cells, r0 + c + kRowsAhead, 0, 256);
      const uint16_t* kr = reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r0 + c]) * k_stride);
      // s[h] = a_j0 + a_j1 for every head.
      auto pair_sum = [&](int j0, int j1, __m256* s) {
        const __m256 x0 = load8(kr + 8 * j0), x1 = load8(kr + 64 + 8 * j0);
        for (int h = 0; h < H; ++h) {
          const float* qh = q + h * ldq;
          s[h] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(qh + 64 + 8 * j0),
                                 _mm256_fmadd_ps(x0, _mm256_loadu_ps(qh + 8 * j0), _mm256_setzero_ps()));
        }
        const __m256 y0 = load8(kr + 8 * j1), y1 = load8(kr + 64 + 8 * j1);
        for (int h = 0; h < H; ++h) {
          const float* qh = q + h * ldq;
          s[h] = _mm256_add_ps(s[h],
                               _mm256_fmadd_ps(y1, _mm256_loadu_ps(qh + 64 + 8 * j1),
                                               _mm256_fmadd_ps(y0, _mm256_loadu_ps(qh + 8 * j1), _mm256_setzero_ps())));
        }
      };
      __m256 lo[H], s[H], u[H];
      pair_sum(0, 4, lo);
      pair_sum(2, 6, s);
      for (int h = 0; h < H; ++h) lo[h] = _mm256_add_ps(lo[h], s[h]);
      pair_sum(1, 5, s);
      pair_sum(3, 7, u);
      for (int h = 0; h < H; ++h) _mm256_store_ps(t[h][c], _mm256_add_ps(lo[h], _mm256_add_ps(s[h], u[h])));
    }
    finish_heads_cells(&t[0][0][0], H, nc, out + r0, ldo);
  }
}

// ggml_vec_dot_f16's order at dk 64: dots_heads64 over up to kHeads64Max heads at a time; at dk 128: dots_heads128
// over three or two heads; otherwise dots_f16 head by head (two or three heads' 8-lane accumulators held over a
// whole row do not fit the 16 registers: 5-15 % slower).
void dots_f16_heads(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t ldq,
                    int64_t m, int64_t dk, bool lanes16, float* out, int64_t ldo) {
  for (int64_t h = 0; h < m;) {
    const int64_t left = m - h;
    const int64_t take = lanes16     ? 1
                         : dk == 64  ? std::min(kHeads64Max, left)
                         : dk == 128 ? (left % 3 == 0 ? 3 : std::min<int64_t>(2, left))
                                     : 1;
    const float* qh = q + h * ldq;
    float* oh = out + h * ldo;
    if (dk == 64 && take == 3) dots_heads64<3>(k, k_stride, cells, n, qh, ldq, take, oh, ldo);
    else if (dk == 64 && take == 4) dots_heads64<4>(k, k_stride, cells, n, qh, ldq, take, oh, ldo);
    else if (dk == 64 && take > 1) dots_heads64<0>(k, k_stride, cells, n, qh, ldq, take, oh, ldo);
    else if (take == 3) dots_heads128<3>(k, k_stride, cells, n, qh, ldq, oh, ldo);
    else if (take == 2) dots_heads128<2>(k, k_stride, cells, n, qh, ldq, oh, ldo);
    else dots_f16(k, k_stride, cells, n, qh, dk, lanes16, oh);
    h += take;
  }
}

// dots_f16_heads for `groups` kv heads of m heads each, their K slices group_bytes apart in a row: dots_groups64 at
// dk 64 in ggml_vec_dot_f16's order with 3 or 4 heads a kv head (up to kGroupsMaxHeads in all), else kv head by kv
// head (the same bits either way).
void dots_f16_groups(const uint8_t* k, uint64_t k_stride, uint64_t group_bytes, const int32_t* cells, int64_t n,
                     const float* q, int64_t ldq, int64_t groups, int64_t m, int64_t dk, bool lanes16, float* out,
                     int64_t ldo) {
  const bool whole = !lanes16 && dk == 64 && groups * m <= kGroupsMaxHeads;
  if (whole && m == 3) return dots_groups64<3>(k, k_stride, group_bytes, cells, n, q, ldq, groups, out, ldo);
  if (whole && m == 4) return dots_groups64<4>(k, k_stride, group_bytes, cells, n, q, ldq, groups, out, ldo);
  for (int64_t g = 0; g < groups; ++g)
    dots_f16_heads(k + g * group_bytes, k_stride, cells, n, q + g * m * ldq, ldq, m, dk, lanes16, out + g * m * ldo,
                   ldo);
}

// Lane by lane: lane l's accumulator row stays in registers (64 elements)
// while the cells l, l + lanes, ... are added in order: the FMAs of one
// axpy_f16 per cell, element by element.
// Lanes l0 .. l0 + 3 side by side over C vectors of 8 columns from i0: each lane's cells in order (the same FMAs
// as one lane at a time), four consecutive cells' V rows read together.
template <int C>
void accumulate_f16_lanes4(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                           int64_t lanes, int64_t l0, int64_t i0, int64_t dv, float* acc) {
  __m256 reg[4][C];
  for (int u = 0; u < 4; ++u)
    for (int j = 0; j < C; ++j) reg[u][j] = _mm256_loadu_ps(acc + (l0 + u) * dv + i0 + 8 * j);
  for (int64_t base = l0; base < n; base += lanes)
    for (int u = 0; u < 4; ++u) {
      const int64_t r = base + u;
      if (r >= n) break;
      const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0;
      const __m256 pv = _mm256_set1_ps(p[r]);
      for (int j = 0; j < C; ++j) reg[u][j] = _mm256_fmadd_ps(load8(vr + 8 * j), pv, reg[u][j]);
    }
  for (int u = 0; u < 4 && l0 + u < n; ++u)
    for (int j = 0; j < C; ++j) _mm256_storeu_ps(acc + (l0 + u) * dv + i0 + 8 * j, reg[u][j]);
}

void accumulate_f16(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n, int64_t lanes,
                    int64_t dv, float* acc) {
  const int64_t d8 = dv & ~int64_t(7);
  int64_t l4 = 0;  // lanes below l4 took the 4-lane form for their d8 columns
  if (lanes % 4 == 0)
    for (; l4 + 4 <= lanes && l4 + 4 <= n; l4 += 4)
      for (int64_t i0 = 0; i0 < d8;) {
        const int64_t vecs = std::min<int64_t>(3, (d8 - i0) / 8);  // 4 lanes x 3 vectors: 12 accumulators
        if (vecs == 3) accumulate_f16_lanes4<3>(p, v, v_stride, cells, n, lanes, l4, i0, dv, acc);
        else if (vecs == 2) accumulate_f16_lanes4<2>(p, v, v_stride, cells, n, lanes, l4, i0, dv, acc);
        else accumulate_f16_lanes4<1>(p, v, v_stride, cells, n, lanes, l4, i0, dv, acc);
        i0 += 8 * vecs;
      }
  for (int64_t l = 0; l < lanes && l < n; ++l) {
    float* a = acc + l * dv;
    for (int64_t i0 = 0; i0 < d8 && l >= l4; i0 += 64) {
      const int nreg = int(d8 - i0 >= 64 ? 8 : (d8 - i0) / 8);
      __m256 reg[8];
      for (int j = 0; j < nreg; ++j) reg[j] = _mm256_loadu_ps(a + i0 + 8 * j);
      for (int64_t r = l; r < n; r += lanes) {
        const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0;
        const __m256 pv = _mm256_set1_ps(p[r]);
        for (int j = 0; j < nreg; ++j) reg[j] = _mm256_fmadd_ps(load8(vr + 8 * j), pv, reg[j]);
      }
      for (int j = 0; j < nreg; ++j) _mm256_storeu_ps(a + i0 + 8 * j, reg[j]);
    }
    for (int64_t r = l; r < n && d8 < dv; r += lanes) {
      const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride);
      for (int64_t i = d8; i < dv; ++i) a[i] = std::fma(_cvtsh_ss(vr[i]), p[r], a[i]);
    }
  }
}

// The heads of one kv head with the cells in order: C vectors of 8 columns from i0 of a cell's V row widened once,
// then each head's lane accumulators (acc + h * lanes * dv + (r % lanes) * dv) loaded, FMA'd and stored: every
// (head, lane, column) gets accumulate_f16's FMAs in the cells' order; the V rows are read in kCellsPerLane
// streams lanes cells apart, while the next kCellsPerLane * lanes cells' rows are prefetched in address order
// (kCellsPerLane of them per lane step; a prefetch kRowsAhead cells on in each stream ran 12-39 % slower from
// DRAM than two cells per lane: half of it hit rows already read, the rest came late). The kCellsPerLane cells
// r, r + lanes, ... of one lane go together: one load and store of the accumulators for kCellsPerLane FMAs (the
// lanes' next cells, base + l + u * lanes, walked lane after lane). Up to 64 columns a pass (a SmolLM2 kv head's
// 3 x 16 KiB of accumulators spill from L1 to L2, yet two 32-column passes were slower). Two cells per lane until
// stop 28; four: V 11 % shorter with the rows in L2 (bench_attn_decode's vside rows), eight: slower (the 24
// broadcast probabilities spill).
constexpr int kRowsHeads = 4;     // heads per pass of accumulate_rows
constexpr int kCellsPerLane = 4;  // cells of one lane per load and store of its accumulators
// The hint follows the rows' stride. Into L2 (T1) for rows over kVT0MaxStride apart: Qwen3's 2 KiB rows fall into
// two L1 sets per line, and 256 rows ahead into L1 thrashed them (vside qwen3 14-20 % slower than main with
// _MM_HINT_T0, 10-33 % faster with T1). Into L1 (T0) for rows up to kVT0MaxStride apart: Llama-3.2-1B's 1 KiB rows'
// V side 4-12 % shorter from DRAM, SmolLM2's 384-byte rows level (docs/perf/long-contexts3.md "Stop 32", §4).
constexpr uint64_t kVT0MaxStride = 1024;
// Cells r, r + lanes, ..., r + (K - 1) lanes of one lane for H heads and C vectors of 8 columns from i0 (head h's
// accumulators at a + h * ld_head): their FMAs in order, one load and store between them.
template <int H, int C, int K>
void accumulate_lane_cells(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells,
                           int64_t r, int64_t lanes, int64_t i0, int64_t ld_head, float* a) {
  const uint16_t* vr[K];
  __m256 pk[K][H];
  for (int u = 0; u < K; ++u) {
    const int64_t ru = r + u * lanes;
    vr[u] = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[ru]) * v_stride) + i0;
    for (int h = 0; h < H; ++h) pk[u][h] = _mm256_set1_ps(p[h * ldp + ru]);
  }
  for (int j = 0; j < C; ++j) {  // the heads' loads before their stores (heads 16 KiB apart alias by 4 KiB)
    __m256 y[H];
    for (int h = 0; h < H; ++h) y[h] = _mm256_loadu_ps(a + h * ld_head + 8 * j);
    for (int u = 0; u < K; ++u) {
      const __m256 x = load8(vr[u] + 8 * j);
      for (int h = 0; h < H; ++h) y[h] = _mm256_fmadd_ps(x, pk[u][h], y[h]);
    }
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(a + h * ld_head + 8 * j, y[h]);
  }
}

// accumulate_lane_cells for k (1 .. kCellsPerLane) cells.
template <int H, int C>
void accumulate_lane_k(int64_t k, const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride,
                       const int32_t* cells, int64_t r, int64_t lanes, int64_t i0, int64_t ld_head, float* a) {
  if (k == kCellsPerLane)
    accumulate_lane_cells<H, C, kCellsPerLane>(p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a);
  else if (k == 3) accumulate_lane_cells<H, C, 3>(p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a);
  else if (k == 2) accumulate_lane_cells<H, C, 2>(p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a);
  else accumulate_lane_cells<H, C, 1>(p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a);
}

template <int H, int C, _mm_hint kVHint>
void accumulate_rows(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                     int64_t lanes, int64_t i0, int64_t dv, float* acc) {
  const int64_t ld_head = lanes * dv;
  for (int64_t base = 0; base < n; base += kCellsPerLane * lanes)  // each lane's next kCellsPerLane cells
    for (int64_t l = 0; l < lanes && base + l < n; ++l) {
      for (int64_t u = 0; u < kCellsPerLane; ++u) {  // the next kCellsPerLane * lanes cells, in address order
        const int64_t ahead = base + kCellsPerLane * (lanes + l) + u;
        if (ahead < n) prefetch_row<kVHint>(v, v_stride, cells, ahead, 2 * i0, 16 * C);
      }
      const int64_t r = base + l, k = std::min<int64_t>(kCellsPerLane, (n - r + lanes - 1) / lanes);
      accumulate_lane_k<H, C>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, acc + l * dv + i0);
    }
}

// One lane's k cells from r for H heads over all dv columns (dv % 8 == 0), in tiles of up to 64 columns.
template <int H>
void accumulate_lane_cols(int64_t k, const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride,
                          const int32_t* cells, int64_t r, int64_t lanes, int64_t dv, int64_t ld_head, float* a) {
  for (int64_t i0 = 0; i0 < dv;) {
    const int64_t left = (dv - i0) / 8, vecs = left >= 8 ? 8 : left >= 4 ? 4 : left;
    if (vecs == 8) accumulate_lane_k<H, 8>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a + i0);
    else if (vecs == 4) accumulate_lane_k<H, 4>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a + i0);
    else if (vecs == 3) accumulate_lane_k<H, 3>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a + i0);
    else if (vecs == 2) accumulate_lane_k<H, 2>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a + i0);
    else accumulate_lane_k<H, 1>(k, p, ldp, v, v_stride, cells, r, lanes, i0, ld_head, a + i0);
    i0 += 8 * vecs;
  }
}

// accumulate_f16_heads for every kv head of a token at once (kAttnKernelsPrefetch): each lane's next kCellsPerLane
// cells go through every kv head's heads and columns in turn (accumulate_lane_cols), so a cell's row is read whole,
// once, while it sits in L1, and the rows of a step of kCellsPerLane x lanes cells come in address order; no software
// prefetch (the hardware's follows whole rows). Each head's lanes keep their FMA chains: the same bits.
void accumulate_f16_groups(const float* p, int64_t ldp, int64_t groups, int64_t m, const uint8_t* v, uint64_t v_stride,
                           uint64_t group_bytes, const int32_t* cells, int64_t n, int64_t lanes, int64_t lane_begin,
                           int64_t lane_end, int64_t dv, float* acc) {
  const int64_t ld_head = lanes * dv;
  if (dv % 8 != 0) {  // a scalar tail: kv head by kv head, one head at a time
    if (lane_begin != 0 || lane_end < lanes) fail("accumulate_f16_groups: a part of the lanes needs dv % 8 == 0");
    for (int64_t j = 0; j < groups * m; ++j)
      accumulate_f16(p + j * ldp, v + j / m * group_bytes, v_stride, cells, n, lanes, dv, acc + j * ld_head);
    return;
  }
  for (int64_t base = 0; base < n; base += kCellsPerLane * lanes)
    for (int64_t l = lane_begin; l < std::min(lanes, lane_end) && base + l < n; ++l) {
      const int64_t r = base + l, k = std::min<int64_t>(kCellsPerLane, (n - r + lanes - 1) / lanes);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t h = 0; h < m; h += kRowsHeads) {
          const int64_t take = std::min<int64_t>(kRowsHeads, m - h), j = g * m + h;
          const float* ph = p + j * ldp;
          const uint8_t* vg = v + g * group_bytes;
          float* a = acc + j * ld_head + l * dv;
          if (take == 4) accumulate_lane_cols<4>(k, ph, ldp, vg, v_stride, cells, r, lanes, dv, ld_head, a);
          else if (take == 3) accumulate_lane_cols<3>(k, ph, ldp, vg, v_stride, cells, r, lanes, dv, ld_head, a);
          else if (take == 2) accumulate_lane_cols<2>(k, ph, ldp, vg, v_stride, cells, r, lanes, dv, ld_head, a);
          else accumulate_lane_cols<1>(k, ph, ldp, vg, v_stride, cells, r, lanes, dv, ld_head, a);
        }
    }
}

template <int H, _mm_hint kVHint>
void accumulate_rows_cols(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells,
                          int64_t n, int64_t lanes, int64_t dv, float* acc) {
  for (int64_t i0 = 0; i0 < dv;) {
    const int64_t left = (dv - i0) / 8, vecs = left >= 8 ? 8 : left >= 4 ? 4 : left;
    if (vecs == 8) accumulate_rows<H, 8, kVHint>(p, ldp, v, v_stride, cells, n, lanes, i0, dv, acc);
    else if (vecs == 4) accumulate_rows<H, 4, kVHint>(p, ldp, v, v_stride, cells, n, lanes, i0, dv, acc);
    else if (vecs == 3) accumulate_rows<H, 3, kVHint>(p, ldp, v, v_stride, cells, n, lanes, i0, dv, acc);
    else if (vecs == 2) accumulate_rows<H, 2, kVHint>(p, ldp, v, v_stride, cells, n, lanes, i0, dv, acc);
    else accumulate_rows<H, 1, kVHint>(p, ldp, v, v_stride, cells, n, lanes, i0, dv, acc);
    i0 += 8 * vecs;
  }
}

template <int H>
void accumulate_rows_hinted(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells,
                            int64_t n, int64_t lanes, int64_t dv, float* acc) {
  if (v_stride <= kVT0MaxStride) accumulate_rows_cols<H, _MM_HINT_T0>(p, ldp, v, v_stride, cells, n, lanes, dv, acc);
  else accumulate_rows_cols<H, _MM_HINT_T1>(p, ldp, v, v_stride, cells, n, lanes, dv, acc);
}

void accumulate_f16_heads(const float* p, int64_t ldp, int64_t nh, const uint8_t* v, uint64_t v_stride,
                          const int32_t* cells, int64_t n, int64_t lanes, int64_t dv, float* acc) {
  const int64_t ld_head = lanes * dv;
  if (dv % 8 != 0) {  // a scalar tail: one head at a time
    for (int64_t h = 0; h < nh; ++h) accumulate_f16(p + h * ldp, v, v_stride, cells, n, lanes, dv, acc + h * ld_head);
    return;
  }
  for (int64_t h = 0; h < nh; h += kRowsHeads) {
    const int64_t take = std::min<int64_t>(kRowsHeads, nh - h);
    const float* ph = p + h * ldp;
    float* ah = acc + h * ld_head;
    if (take == 4) accumulate_rows_hinted<4>(ph, ldp, v, v_stride, cells, n, lanes, dv, ah);
    else if (take == 3) accumulate_rows_hinted<3>(ph, ldp, v, v_stride, cells, n, lanes, dv, ah);
    else if (take == 2) accumulate_rows_hinted<2>(ph, ldp, v, v_stride, cells, n, lanes, dv, ah);
    else accumulate_rows_hinted<1>(ph, ldp, v, v_stride, cells, n, lanes, dv, ah);
  }
}

double softmax_exp(float* s, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
  double sum = 0.0;
  for (int64_t c = 0; c < n; c += 16) {
    __m256 e[2];
    for (int h = 0; h < 2; ++h) {
      const __m256 v = _mm256_loadu_ps(s + c + 8 * h);
      e[h] = _mm256_andnot_ps(_mm256_cmp_ps(v, ninf, _CMP_EQ_OQ), expf8(_mm256_sub_ps(v, m)));
      _mm256_storeu_ps(s + c + 8 * h, e[h]);
    }
    sum += double(reduce16(e[0], e[1]));
  }
  return sum;
}

// accumulate_f16 (64 lanes, from zero) and reduce_lanes at once, 8 columns at a time, for dv % 8 == 0. reduce_lanes'
// tree, t[l] = (lane l + lane 32 + l) + (lane 16 + l + lane 48 + l), then t[l] + t[l + 8], then + t[l + 4], then
// (t0 + t2) + (t1 + t3), is taken four partial sums at a time, w[l] = (t[l] + t[l + 8]) + (t[l + 4] + t[l + 12])
// (the same operands in the same order), so that 16 registers hold it: each lane's FMA chain over its cells (r =
// lane, lane + 64, ...) runs in a register from zero, and a lane without cells is +0, as reduce_lanes reads a lane
// past `used`.
void accumulate_reduce_f16(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                           int64_t dv, float* out) {
  constexpr int64_t kLanes = 64;
  for (int64_t i0 = 0; i0 < dv; i0 += 8) {
    auto chain = [&](int64_t lane) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t r = lane; r < n; r += kLanes)
        acc = _mm256_fmadd_ps(load8(reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0),
                              _mm256_set1_ps(p[r]), acc);
      return acc;
    };
    auto t = [&](int l) {
      return _mm256_add_ps(_mm256_add_ps(chain(l), chain(32 + l)), _mm256_add_ps(chain(16 + l), chain(48 + l)));
    };
    __m256 w[4];
    for (int l = 0; l < 4; ++l) w[l] = _mm256_add_ps(_mm256_add_ps(t(l), t(l + 8)), _mm256_add_ps(t(l + 4), t(l + 12)));
    _mm256_storeu_ps(out + i0, _mm256_add_ps(_mm256_add_ps(w[0], w[2]), _mm256_add_ps(w[1], w[3])));
  }
}

// 8 outputs at a time; every output sees exactly the scalar form's adds.
void reduce_lanes(const float* acc, int64_t lanes, int64_t used, int64_t dv, float* out) {
  const int64_t d8 = dv & ~int64_t(7);
  auto at = [&](int64_t lane, int64_t i) {
    return lane < used ? _mm256_loadu_ps(acc + lane * dv + i) : _mm256_setzero_ps();
  };
  for (int64_t i = 0; i < d8; i += 8) {
    __m256 t[16];
    for (int l = 0; l < 16; ++l)
      t[l] = lanes == 16
                 ? at(l, i)
                 : _mm256_add_ps(_mm256_add_ps(at(l, i), at(32 + l, i)), _mm256_add_ps(at(16 + l, i), at(48 + l, i)));
    for (int l = 0; l < 8; ++l) t[l] = _mm256_add_ps(t[l], t[l + 8]);
    for (int l = 0; l < 4; ++l) t[l] = _mm256_add_ps(t[l], t[l + 4]);
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3])));
  }
  auto sat = [&](int64_t lane, int64_t i) { return lane < used ? acc[lane * dv + i] : 0.0f; };
  for (int64_t i = d8; i < dv; ++i) {
    float t[16];
    for (int l = 0; l < 16; ++l)
      t[l] = lanes == 16 ? sat(l, i) : (sat(l, i) + sat(32 + l, i)) + (sat(16 + l, i) + sat(48 + l, i));
    for (int l = 0; l < 8; ++l) t[l] += t[l + 8];
    for (int l = 0; l < 4; ++l) t[l] += t[l + 4];
    out[i] = (t[0] + t[2]) + (t[1] + t[3]);
  }
}

uint16_t to_f16_one(float x) {
  return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
}

void to_f16(const float* x, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = to_f16_one(x[i]);
}

// One f16 row of d values widened to f32.
void widen_row(const uint8_t* row, int64_t d, float* out) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(row);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) _mm256_storeu_ps(out + i, load8(src + i));
  for (; i < d; ++i) out[i] = _cvtsh_ss(src[i]);
}

void widen_f16(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    widen_row(base + uint64_t(cells[r]) * stride, d, dst + r * ld);
  }
}

// One query row (decode with a quantized K): 8 cells x 1 query, the lanes
// 0-7 halves of the eight accumulators over all of dk, then the 8-15 halves,
// then one reduce16x8 (the tiles' arithmetic per dot). A short last tile
// repeats its last row and drops the extra results.
void dots_f32_lanes16_one(const float* k, int64_t ldk, int64_t n, const float* q, int64_t dk, float* out) {
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t nc = n - r0 < 8 ? n - r0 : 8;
    const float* kr[8];
    for (int c = 0; c < 8; ++c) kr[c] = k + (r0 + (c < nc ? c : nc - 1)) * ldk;
    __m256 half[2][8];
    for (int h = 0; h < 2; ++h) {
      __m256* a = half[h];
      for (int c = 0; c < 8; ++c) a[c] = _mm256_setzero_ps();
      for (int64_t i = 8 * h; i < dk; i += 16) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(kr[c] + i), qv, a[c]);
      }
    }
    const __m256 res = reduce16x8(half[0], half[1]);
    if (nc == 8) {
      _mm256_storeu_ps(out + r0, res);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, res);
      for (int64_t c = 0; c < nc; ++c) out[r0 + c] = tmp[c];
    }
  }
}

// r[c] = column c of the 8 x 8 block r (rows = queries, columns = cells). Inlined into its callers so that the
// block stays in registers (a call took the 8 vectors through memory).
[[gnu::always_inline]] inline void transpose8x8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 *a = t + 4 * h, *b = t + 4 * h + 2;
    u[4 * h] = _mm256_shuffle_ps(a[0], b[0], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(a[0], b[0], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(a[1], b[1], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(a[1], b[1], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// Transposed K in 16-cell strips (dk <= 64, dk % 16 == 0): the rows of 16 cells transposed once into ks
// ([dk][16], zeros past the last cell), then tiles of Q <= kStripQueries queries x 16 cells taken lane by lane:
// lane l's accumulators (dims l, l + 16, ...: dot_f16_lanes16's FMA chain from +0) for the Q queries x 2
// registers of 8 cells are 2 Q independent chains, each K vector loaded once for Q FMAs and each q value
// broadcast once for 2 (12 accumulators + 2 K vectors + 1 broadcast: 15 of the 16 ymm registers). The 16
// lanes' sums go to an L1 buffer, and reduce_add16's tree then runs between registers from it (lane l + lane
// l + 8, then + 4, then (0 + 2) + (1 + 3)), so each register of 8 finished dots goes straight into its query's
// row. Stop 28: the former tiles of 2 queries x 8 cells (one register per lane of 8 dots, the tree's partial
// sums held in registers lane pair by lane pair) had 4 chains per lane pair, 1.5 loads per FMA and a tree GCC
// spilled: dots/smollm2/avx2 58 -> 85 GFLOP/s (peak/avx2 114). At dk 128 the 4 x 2 tiles below stay (the strips
// read 91-93 against 87-88 GFLOP/s in dots/qwen3/avx2 but level in prompt/qwen3/d4096).
constexpr int64_t kStripMaxDk = 64;
constexpr int64_t kStripCells = 16;

template <int DK, int Q>
void strip_tile(const float* ks, const float* const* qr, const int64_t* n, int64_t r0, int64_t dk_rt, float* out,
                int64_t ldo) {
  const int64_t dk = DK ? DK : dk_rt;
  alignas(32) float lanes[16][Q][2][8];
  for (int l = 0; l < 16; ++l) {
    __m256 a[Q][2];
    for (int j = 0; j < Q; ++j) a[j][0] = a[j][1] = _mm256_setzero_ps();
    for (int64_t s = l; s < dk; s += 16) {
      __m256 k0 = _mm256_load_ps(ks + s * kStripCells), k1 = _mm256_load_ps(ks + s * kStripCells + 8);
      asm("" : "+x"(k0), "+x"(k1));  // one load per vector, not one per FMA (GCC 12)
      for (int j = 0; j < Q; ++j) {
        const __m256 qv = _mm256_broadcast_ss(qr[j] + s);
        a[j][0] = _mm256_fmadd_ps(k0, qv, a[j][0]);
        a[j][1] = _mm256_fmadd_ps(k1, qv, a[j][1]);
      }
    }
    for (int j = 0; j < Q; ++j)
      for (int h = 0; h < 2; ++h) _mm256_store_ps(lanes[l][j][h], a[j][h]);
  }
  for (int j = 0; j < Q; ++j)
    for (int h = 0; h < 2; ++h) {
      __m256 t[8];
      for (int l = 0; l < 8; ++l)
        t[l] = _mm256_add_ps(_mm256_load_ps(lanes[l][j][h]), _mm256_load_ps(lanes[l + 8][j][h]));
      for (int l = 0; l < 4; ++l) t[l] = _mm256_add_ps(t[l], t[l + 4]);
      const __m256 dot = _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
      const int64_t left = n[j] - r0 - 8 * h;
      if (left >= 8) {
        _mm256_storeu_ps(out + j * ldo + r0 + 8 * h, dot);
      } else if (left > 0) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, dot);
        std::copy(tmp, tmp + left, out + j * ldo + r0 + 8 * h);
      }
    }
}

// ks[i * 16 + c] = k[(r0 + c) * ldk + i] for c < 16 (0 for r0 + c >= n_max), i < dk.
void transpose_k_strip(const float* k, int64_t ldk, int64_t r0, int64_t n_max, int64_t dk, float* ks) {
  for (int64_t cb = 0; cb < kStripCells; cb += 8)
    for (int64_t i0 = 0; i0 < dk; i0 += 8) {
      __m256 r[8];
      for (int64_t x = 0; x < 8; ++x)
        r[x] = r0 + cb + x < n_max ? _mm256_loadu_ps(k + (r0 + cb + x) * ldk + i0) : _mm256_setzero_ps();
      transpose8x8(r);
      for (int64_t d = 0; d < 8; ++d) _mm256_store_ps(ks + (i0 + d) * kStripCells + cb, r[d]);
    }
}

constexpr int kStripQueries = 6;

template <int DK>
void dots_f32_lanes16_strips(const float* k, int64_t ldk, const int64_t* n, const float* q, int64_t ldq, int64_t m,
                             int64_t dk, float* out, int64_t ldo, int64_t n_max) {
  alignas(32) float ks[kStripMaxDk * kStripCells];
  for (int64_t r0 = 0; r0 < n_max; r0 += kStripCells) {
    transpose_k_strip(k, ldk, r0, n_max, dk, ks);
    for (int64_t j0 = 0; j0 < m; j0 += kStripQueries) {
      const int64_t nq = m - j0 < kStripQueries ? m - j0 : kStripQueries;
      bool any = false;
      for (int64_t j = j0; j < j0 + nq; ++j) any = any || n[j] > r0;
      if (!any) continue;
      const float* qr[kStripQueries];
      for (int64_t j = 0; j < nq; ++j) qr[j] = q + (j0 + j) * ldq;
      float* o = out + j0 * ldo;
      if (nq == 6) strip_tile<DK, 6>(ks, qr, n + j0, r0, dk, o, ldo);
      else if (nq == 5) strip_tile<DK, 5>(ks, qr, n + j0, r0, dk, o, ldo);
      else if (nq == 4) strip_tile<DK, 4>(ks, qr, n + j0, r0, dk, o, ldo);
      else if (nq == 3) strip_tile<DK, 3>(ks, qr, n + j0, r0, dk, o, ldo);
      else if (nq == 2) strip_tile<DK, 2>(ks, qr, n + j0, r0, dk, o, ldo);
      else strip_tile<DK, 1>(ks, qr, n + j0, r0, dk, o, ldo);
    }
  }
}

// Tiles of 4 cells x 2 queries: the lanes 0-7 of the eight accumulators over
// all of dk, then lanes 8-15, then one reduce16x8. Short tiles repeat the
// last row or query and drop the extra results; a tile of queries stops at
// its longest row.
void dots_f32_lanes16(const float* k, int64_t ldk, const int64_t* n, const float* q, int64_t ldq, int64_t m, int64_t dk,
                      float* out, int64_t ldo) {
  if (m == 1) return dots_f32_lanes16_one(k, ldk, n[0], q, dk, out);
  int64_t n_max = 0;
  for (int64_t j = 0; j < m; ++j) n_max = n[j] > n_max ? n[j] : n_max;
  if (dk == 64) return dots_f32_lanes16_strips<64>(k, ldk, n, q, ldq, m, dk, out, ldo, n_max);
  if (dk < 64) return dots_f32_lanes16_strips<0>(k, ldk, n, q, ldq, m, dk, out, ldo, n_max);
  for (int64_t r0 = 0; r0 < n_max; r0 += 4)  // four K rows stay in L1 while every query pair meets them
    for (int64_t j0 = 0; j0 < m; j0 += 2) {
      const int64_t nq = m - j0 < 2 ? m - j0 : 2;
      const int64_t n_tile = nq == 2 && n[j0 + 1] > n[j0] ? n[j0 + 1] : n[j0];
      if (n_tile <= r0) continue;
      const float* q0 = q + j0 * ldq;
      const float* q1 = q + (j0 + nq - 1) * ldq;
      const int64_t nc = n_tile - r0 < 4 ? n_tile - r0 : 4;
      const float* kr[4];
      for (int c = 0; c < 4; ++c) kr[c] = k + (r0 + (c < nc ? c : nc - 1)) * ldk;
      __m256 half[2][8];
      for (int h = 0; h < 2; ++h) {
        // the accumulators in a local array, copied out after the loop: through half[h] GCC 12 stored all
        // eight every step, and it folded each q load into four FMAs (the asm keeps one load per vector)
        __m256 a[8];
        for (int x = 0; x < 8; ++x) a[x] = _mm256_setzero_ps();
        for (int64_t i = 8 * h; i < dk; i += 16) {
          __m256 k0 = _mm256_loadu_ps(kr[0] + i), k1 = _mm256_loadu_ps(kr[1] + i);
          __m256 k2 = _mm256_loadu_ps(kr[2] + i), k3 = _mm256_loadu_ps(kr[3] + i);
          __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i);
          asm("" : "+x"(k0), "+x"(k1), "+x"(k2), "+x"(k3), "+x"(x0), "+x"(x1));
          a[0] = _mm256_fmadd_ps(k0, x0, a[0]);
          a[1] = _mm256_fmadd_ps(k1, x0, a[1]);
          a[2] = _mm256_fmadd_ps(k2, x0, a[2]);
          a[3] = _mm256_fmadd_ps(k3, x0, a[3]);
          a[4] = _mm256_fmadd_ps(k0, x1, a[4]);
          a[5] = _mm256_fmadd_ps(k1, x1, a[5]);
          a[6] = _mm256_fmadd_ps(k2, x1, a[6]);
          a[7] = _mm256_fmadd_ps(k3, x1, a[7]);
        }
        for (int x = 0; x < 8; ++x) half[h][x] = a[x];
      }
      alignas(32) float res[8];
      _mm256_store_ps(res, reduce16x8(half[0], half[1]));
      for (int j = 0; j < nq; ++j) {
        const int64_t left = n[j0 + j] - r0;
        for (int64_t c = 0; c < 4 && c < left; ++c) out[(j0 + j) * ldo + r0 + c] = res[4 * j + c];
      }
    }
}

// 32 elements of MQ queries at a time, lane by lane: the lane's
// accumulators stay in registers over its cells (r = l, l + 16, ...), each v
// vector loaded feeds MQ FMAs; a cell seen by only some queries of the tile
// is added to theirs alone (each query gets exactly its own FMAs, in the
// cells' order). The 16 lanes then go through reduce_lanes' tree from an L1
// buffer; lanes without a cell stay +0, which is what reduce_lanes reads.
// kKeep (attend_v_lanes16_keep): the accumulators start from acc (query j,
// lane l at acc + (j * 16 + l) * dv) and go back there unreduced, so a block
// walks its cells in chunks with each lane's FMA chain unbroken.
template <int MQ, bool kKeep = false>
void attend_v_tile(const float* p, int64_t ldp, const int64_t* nv, const float* v, int64_t ldv, int64_t lane_rows,
                   int64_t dv, float* const* out, float* acc = nullptr) {
  int64_t lo = nv[0], hi = nv[0];
  for (int j = 1; j < MQ; ++j) {
    lo = nv[j] < lo ? nv[j] : lo;
    hi = nv[j] > hi ? nv[j] : hi;
  }
  alignas(32) float lanes[16][MQ][32];
  for (int64_t i0 = 0; i0 < dv; i0 += 32) {
    const int64_t len = dv - i0 >= 32 ? 32 : dv - i0;
    const bool full = len == 32;
    __m256i mk[4];
    for (int d = 0; d < 4; ++d) {
      const int64_t left = len - 8 * d;
      mk[d] =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left < 0 ? 0 : left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    auto load = [&](const float* x, int d) { return full ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, mk[d]); };
    for (int64_t l = 0; l < 16; ++l) {
      __m256 a[MQ][4];
      for (int j = 0; j < MQ; ++j)
        for (int d = 0; d < 4; ++d)
          a[j][d] = kKeep ? load(acc + (j * 16 + l) * dv + i0 + 8 * d, d) : _mm256_setzero_ps();
      int64_t r = l;
      const float* vr = v + l * lane_rows * ldv + i0;  // the lane's rows in order
      for (; r < lo; r += 16, vr += ldv) {
        __m256 x[4];
        for (int d = 0; d < 4; ++d) x[d] = load(vr + 8 * d, d);
        for (int j = 0; j < MQ; ++j) {
          const __m256 pj = _mm256_set1_ps(p[j * ldp + r]);
          for (int d = 0; d < 4; ++d) a[j][d] = _mm256_fmadd_ps(x[d], pj, a[j][d]);
        }
      }
      for (; r < hi; r += 16, vr += ldv) {
        __m256 x[4];
        for (int d = 0; d < 4; ++d) x[d] = load(vr + 8 * d, d);
        for (int j = 0; j < MQ; ++j) {
          if (r >= nv[j]) continue;
          const __m256 pj = _mm256_set1_ps(p[j * ldp + r]);
          for (int d = 0; d < 4; ++d) a[j][d] = _mm256_fmadd_ps(x[d], pj, a[j][d]);
        }
      }
      for (int j = 0; j < MQ; ++j)
        for (int d = 0; d < 4; ++d) {
          if (!kKeep) {
            _mm256_store_ps(lanes[l][j] + 8 * d, a[j][d]);
            continue;
          }
          float* dst = acc + (j * 16 + l) * dv + i0 + 8 * d;
          if (full) _mm256_storeu_ps(dst, a[j][d]);
          else _mm256_maskstore_ps(dst, mk[d], a[j][d]);
        }
    }
    if (kKeep) continue;
    for (int j = 0; j < MQ; ++j)
      for (int d = 0; d < 4 && 8 * d < len; ++d) {
        __m256 t[8];
        for (int q = 0; q < 8; ++q)
          t[q] = _mm256_add_ps(_mm256_load_ps(lanes[q][j] + 8 * d), _mm256_load_ps(lanes[q + 8][j] + 8 * d));
        for (int q = 0; q < 4; ++q) t[q] = _mm256_add_ps(t[q], t[q + 4]);
        const __m256 res = _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
        if (full) _mm256_storeu_ps(out[j] + i0 + 8 * d, res);
        else _mm256_maskstore_ps(out[j] + i0 + 8 * d, mk[d], res);
      }
  }
}

void attend_v_lanes16(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                      int64_t lane_rows, int64_t dv, float* const* out) {
  for (int64_t j = 0; j < m; j += 3) {
    const int64_t left = m - j;
    if (left >= 3) attend_v_tile<3>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, out + j);
    else if (left == 2) attend_v_tile<2>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, out + j);
    else attend_v_tile<1>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, out + j);
  }
}

void attend_v_lanes16_keep(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                           int64_t lane_rows, int64_t dv, float* acc) {
  for (int64_t j = 0; j < m; j += 3) {
    const int64_t left = m - j;
    float* a = acc + j * 16 * dv;
    if (left >= 3) attend_v_tile<3, true>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, nullptr, a);
    else if (left == 2) attend_v_tile<2, true>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, nullptr, a);
    else attend_v_tile<1, true>(p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, nullptr, a);
  }
}

// s *= scale, and std::max's fold from -inf (NaN skipped: vmaxps returns its
// second operand for a NaN). Lane-wise maxima give the same number; only +0
// and -0 could come out in another order, so a zero maximum is folded again
// in order.
float scale_max(float* s, int64_t n, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 mx = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + i), sc);
    _mm256_storeu_ps(s + i, x);
    mx = _mm256_max_ps(x, mx);
  }
  float r = hmax8(mx);
  for (; i < n; ++i) {
    s[i] *= scale;
    r = r < s[i] ? s[i] : r;
  }
  if (r == 0.0f) {
    r = -INFINITY;
    for (int64_t c = 0; c < n; ++c) r = r < s[c] ? s[c] : r;
  }
  return r;
}

void scale_round_f16(float* s, int64_t n, float inv) {
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + i), iv);
    _mm256_storeu_ps(s + i, _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
  for (; i < n; ++i) s[i] = _cvtsh_ss(to_f16_one(s[i] * inv));
}

// softmax_exp's exponentials and sum for the block path (the same bits), kExpStep cells a step: expf8_poly
// for the step's vectors side by side, each 16-cell chunk's reduce_add16 kept, and the chunk sums of
// kExpSegment cells then added to the double sum in the cells' order (GCC parked a sum carried through the
// unrolled steps in a general register: two moves in its chain every step). expf8 forms j * 2^n as
// (j * 2^a) * 2^(n - a), a = n / 2, for |n| up to 192; where every n of a step lies in [-126, 127], 2^n is a
// normal float, j * 2^a is exact and the second product rounds the exact j * 2^n once, so j * 2^n in one product
// is the same number: the step takes it (five integer operations and a product fewer per vector), and any step
// with a larger |n| (an -inf score, a score 87 below the maximum) takes expf8_scale.
constexpr int64_t kExpStep = 32;       // cells per step of exp_sum_block: 4 vectors
constexpr int64_t kExpSegment = 1024;  // cells whose chunk sums are kept, then added (a multiple of kExpStep)

template <int V>
[[gnu::always_inline]] inline void exp_sum_step(float* s, __m256 m, float* chunk_sums) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 x[V], res[V];
  ExpParts parts[V];
  __m256 far = _mm256_setzero_ps();
  for (int v = 0; v < V; ++v) {
    x[v] = _mm256_loadu_ps(s + 8 * v);
    parts[v] = expf8_poly(_mm256_sub_ps(x[v], m));
    far = _mm256_or_ps(far, _mm256_cmp_ps(abs_ps(parts[v].n), _mm256_set1_ps(126.0f), _CMP_GT_OQ));
  }
  if (_mm256_testz_ps(far, far)) {
    for (int v = 0; v < V; ++v) res[v] = _mm256_mul_ps(parts[v].j, pow2i(_mm256_cvttps_epi32(parts[v].n)));
  } else {
    for (int v = 0; v < V; ++v) res[v] = expf8_scale(parts[v]);
  }
  __m256 e[V];
  for (int v = 0; v < V; ++v) {
    e[v] = _mm256_andnot_ps(_mm256_cmp_ps(x[v], ninf, _CMP_EQ_OQ), res[v]);
    _mm256_storeu_ps(s + 8 * v, e[v]);
  }
  for (int v = 0; v < V; v += 2) chunk_sums[v / 2] = reduce16(e[v], e[v + 1]);
}

double exp_sum_block(float* s, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  double sum = 0.0;
  float chunk_sums[kExpSegment / 16];
  for (int64_t c0 = 0; c0 < n; c0 += kExpSegment) {
    const int64_t end = n - c0 < kExpSegment ? n : c0 + kExpSegment;
    int64_t c = c0;
    for (; c + kExpStep <= end; c += kExpStep) exp_sum_step<kExpStep / 8>(s + c, m, chunk_sums + (c - c0) / 16);
    for (; c < end; c += 16) exp_sum_step<2>(s + c, m, chunk_sums + (c - c0) / 16);
    for (int64_t h = 0; h < (end - c0) / 16; ++h) sum += double(chunk_sums[h]);
  }
  return sum;
}

// 8 queries x 8 cells at a time: each query's scores scaled and rounded as scale_round_f16, the 8 x 8 block
// transposed, cell c's 8 values stored into its lane's row.
void round_p_lanes(const float* s, int64_t lds, const int64_t* n, const float* inv, int64_t m, int64_t nc,
                   int64_t lane_rows, float* pt, int64_t ldt) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j0 = 0; j0 < m; j0 += 8) {
    const int64_t nq = m - j0 < 8 ? m - j0 : 8;
    for (int64_t c0 = 0; c0 < nc; c0 += 8) {
      __m256 r[8];
      for (int jj = 0; jj < 8; ++jj) {
        const int64_t left = jj < nq ? n[j0 + jj] - c0 : 0;
        if (left <= 0) {
          r[jj] = _mm256_setzero_ps();
          continue;
        }
        const float* src = s + (j0 + jj) * lds + c0;
        const __m256 in = left >= 8 ? _mm256_loadu_ps(src)
                                    : _mm256_maskload_ps(src, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left)), iota));
        const __m256 x = _mm256_mul_ps(in, _mm256_set1_ps(inv[j0 + jj]));  // 0 where masked (inv is finite)
        r[jj] = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      transpose8x8(r);
      const int64_t ncc = nc - c0 < 8 ? nc - c0 : 8;
      for (int64_t c = 0; c < ncc; ++c) _mm256_storeu_ps(pt + (((c0 + c) % 16) * lane_rows + c0 / 16) * ldt + j0, r[c]);
    }
  }
}

// MQ queries x 8 ND columns of one lane: the accumulators (acc + j * 16 * dv + 8 d) in registers over the
// lane's rows (v and pt step one row per cell r = l, l + 16, ...); a cell seen by only some queries of the
// tile is added to theirs alone, as attend_v_tile.
template <int MQ, int ND, bool kFull>
void attend_v_cells_tile(const float* pt, int64_t ldt, const int64_t* nv, int64_t l, const float* v, int64_t ldv,
                         const __m256i* mk, int64_t dv, float* acc) {
  int64_t lo = nv[0], hi = nv[0];
  for (int j = 1; j < MQ; ++j) {
    lo = nv[j] < lo ? nv[j] : lo;
    hi = nv[j] > hi ? nv[j] : hi;
  }
  if (hi <= l) return;  // no cell of this lane: the accumulators stay as they are
  auto load = [&](const float* x, int d) { return kFull ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, mk[d]); };
  __m256 a[MQ][ND];
  for (int j = 0; j < MQ; ++j)
    for (int d = 0; d < ND; ++d) a[j][d] = load(acc + j * 16 * dv + 8 * d, d);
  int64_t r = l;
  const float* vr = v;
  const float* pr = pt;
  for (; r < lo; r += 16, vr += ldv, pr += ldt) {
    __m256 x[ND];
    for (int d = 0; d < ND; ++d) {
      x[d] = load(vr + 8 * d, d);
      asm("" : "+x"(x[d]));  // one load per vector: GCC 12 folds it into each of the MQ FMAs otherwise
    }
    for (int j = 0; j < MQ; ++j) {
      const __m256 pj = _mm256_set1_ps(pr[j]);
      for (int d = 0; d < ND; ++d) a[j][d] = _mm256_fmadd_ps(x[d], pj, a[j][d]);
    }
  }
  for (; r < hi; r += 16, vr += ldv, pr += ldt) {
    __m256 x[ND];
    for (int d = 0; d < ND; ++d) x[d] = load(vr + 8 * d, d);
    for (int j = 0; j < MQ; ++j) {
      if (r >= nv[j]) continue;
      const __m256 pj = _mm256_set1_ps(pr[j]);
      for (int d = 0; d < ND; ++d) a[j][d] = _mm256_fmadd_ps(x[d], pj, a[j][d]);
    }
  }
  for (int j = 0; j < MQ; ++j)
    for (int d = 0; d < ND; ++d) {
      float* dst = acc + j * 16 * dv + 8 * d;
      if (kFull) _mm256_storeu_ps(dst, a[j][d]);
      else _mm256_maskstore_ps(dst, mk[d], a[j][d]);
    }
}

// Lane by lane, 8 kCellsCols columns at a time: the lane's V rows and p rows stay in L1 while the tiles of
// kCellsTile queries pass over them (kCellsTile x kCellsCols accumulators and kCellsCols V vectors fit the 16
// ymm registers).
constexpr int kCellsTile = 6, kCellsCols = 2;  // kCellsTile <= 6
void attend_v_lanes16_cells(const float* pt, int64_t ldt, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                            int64_t lane_rows, int64_t dv, float* acc) {
  using Tile =
      void (*)(const float*, int64_t, const int64_t*, int64_t, const float*, int64_t, const __m256i*, int64_t, float*);
  const Tile full[7] = {nullptr,
                        attend_v_cells_tile<1, kCellsCols, true>,
                        attend_v_cells_tile<2, kCellsCols, true>,
                        attend_v_cells_tile<3, kCellsCols, true>,
                        attend_v_cells_tile<4, kCellsCols, true>,
                        attend_v_cells_tile<5, kCellsCols, true>,
                        attend_v_cells_tile<6, kCellsCols, true>};
  const Tile part[7] = {nullptr,
                        attend_v_cells_tile<1, kCellsCols, false>,
                        attend_v_cells_tile<2, kCellsCols, false>,
                        attend_v_cells_tile<3, kCellsCols, false>,
                        attend_v_cells_tile<4, kCellsCols, false>,
                        attend_v_cells_tile<5, kCellsCols, false>,
                        attend_v_cells_tile<6, kCellsCols, false>};
  constexpr int64_t kCols = 8 * kCellsCols;
  for (int64_t l = 0; l < 16; ++l)
    for (int64_t i0 = 0; i0 < dv; i0 += kCols) {
      const int64_t len = dv - i0 < kCols ? dv - i0 : kCols;
      __m256i mk[kCellsCols];
      for (int d = 0; d < kCellsCols; ++d) {
        const int64_t left = len - 8 * d;
        mk[d] =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left < 0 ? 0 : left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      }
      const Tile* tiles = len == kCols ? full : part;
      const float* vl = v + l * lane_rows * ldv + i0;
      const float* pl = pt + l * lane_rows * ldt;
      for (int64_t j0 = 0; j0 < m; j0 += kCellsTile) {
        const int64_t nq = m - j0 < kCellsTile ? m - j0 : kCellsTile;
        tiles[nq](pl + j0, ldt, n_vis + j0, l, vl, ldv, mk, dv, acc + (j0 * 16 + l) * dv + i0);
      }
    }
}

// widen_f16 with software prefetch: the lines of the row kWidenAhead cells on are requested (prefetcht0) before
// the current row is converted, so several gathered rows are in flight at once.
constexpr int64_t kWidenAhead = 6;
void widen_f16_ahead(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                     int64_t ld) {
  const int64_t bytes = d * 2;
  auto fetch = [&](int64_t r) {
    const char* a = reinterpret_cast<const char*>(base + uint64_t(cells[r]) * stride);
    for (int64_t x = 0; x < bytes; x += 64) _mm_prefetch(a + x, _MM_HINT_T0);
  };
  for (int64_t r = 0; r < n && r < kWidenAhead; ++r) fetch(r);
  for (int64_t r = 0; r < n; ++r) {
    if (r + kWidenAhead < n) fetch(r + kWidenAhead);
    widen_row(base + uint64_t(cells[r]) * stride, d, dst + r * ld);
  }
}

}  // namespace

const AttnKernels kAttnKernels = {"avx2",
                                  dot_f16_lanes16,
                                  dot_f16_vec,
                                  axpy_f16,
                                  dots_f16,
                                  accumulate_f16,
                                  softmax_exp,
                                  reduce_lanes,
                                  to_f16,
                                  widen_f16,
                                  dots_f32_lanes16,
                                  attend_v_lanes16,
                                  scale_max,
                                  scale_round_f16,
                                  attend_v_lanes16_keep,
                                  accumulate_f16_heads,
                                  0,
                                  round_p_lanes,
                                  attend_v_lanes16_cells,
                                  widen_f16_ahead,
                                  dots_f16_heads,
                                  0,
                                  0,
                                  exp_sum_block,
                                  dots_f16_groups,
                                  accumulate_reduce_f16,
                                  0,
                                  nullptr,
                                  0,
                                  false};

constexpr int64_t kGroupsVSmallMinCells = 1024;  // see AttnKernels::groups_v_small_min_cells
const AttnKernels kAttnKernelsPrefetch = [] {
  AttnKernels k = kAttnKernels;
  k.accumulate_f16_groups = accumulate_f16_groups;
  k.groups_v_small_min_cells = kGroupsVSmallMinCells;
  return k;
}();

}  // namespace opal::cpu::avx2
#endif  // x86
