// f16 KV-cache dot products and axpy for attention with AVX-512 (vcvtph2ps),
// in llama.cpp's summation orders (kernels/llama_order.h): one 16-lane
// FMA accumulator (tinyBLAS), or four over steps of 64 with a double tail
// (ggml_vec_dot_f16). _mm512_reduce_add_ps is the reduce_add16 tree.
// The per-(token, head) helpers batch cells: dots 4 cells at a time (16 cells
// reduced together in ggml_vec_dot_f16 order), V accumulated 4 lanes at a
// time with the accumulators in registers (each lane's cells in order), or
// for the query heads of one kv head at once one lane at a time within chunks
// of 1024 cells (the next chunk's rows prefetched into L2), each V vector
// widened once for every head (accumulate_f16_heads: the staged decode, and
// SmolLM2-size heads from 8192 cells); the
// decode's K dots likewise take the heads of one kv head together, each K
// vector widened once for two, three or four heads, two cells at a time
// (dots_f16_heads). Both take four heads (Llama-3.2-1B's group) in one pass.
// Where the decode prefetches (an Intel core: kAttnKernelsPrefetch), a one-thread decode's K dots of every kv head
// go 16 cells at a time over whole rows (dots_f16_groups) and heads of 64 values take V together, both from 512 cells;
// V for every kv head of a token at once reads whole rows too, a lane's rows of a chunk once for all its tiles
// (accumulate_f16_groups).
// The block helpers work on K/V rows widened to f32 once for many query rows:
// dots with K transposed per 32 cells for dk <= 256 (a register holds one
// lane's accumulator for 16 cells, so reduce_add16's tree is adds between
// registers), 4 x 4 tiles with a transposed reduce_add16 beyond, and V
// accumulation in registers lane by lane with the lanes' reduction fused. For long chunks (attend_v_lanes16_cells) p is
// first rounded into a lane-major copy (round_p_lanes: 16 x 16 transposes by vpermt2ps), then each lane's rows stay in
// L1 while 4-query x 64-column tiles pass over them. Where GCC 12 folded a vector load into each FMA that uses it (a
// load-bound loop), an empty asm keeps the vector in a register.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/x86_avx512/kernels_avx512.h"
#include "backends/cpu/kernels/x86_avx512/reduce_avx512.h"
#include "core/error.h"

namespace opal::cpu::avx512 {
namespace {

// Cells per chunk of accumulate_heads (a multiple of any lane count, 16 or 64): a chunk's V slice of one kv head
// (128 KiB for SmolLM2's 128-byte slices, 256 KiB for Qwen3's) stays in L2 while its lanes are walked. 512 and 2048
// were slower than 1024 at d16384 (bench_attn_decode, docs/PERF.md "Stop 23, fa0d").
constexpr int64_t kHeadsChunkCells = 1024;
// heads_small_min_cells: from 8192 cells a SmolLM2 kv head's V slice set (1 MiB) no longer stays in L2 for its next
// head, and the per-pair lanes (16 passes a head, each a stride of 64 rows) read it from L3 / DRAM three times;
// below, the per-pair form was level with the chunked heads (d4096) or faster (the unchunked lane walk) on AMD's
// cores. On an Intel Xeon the chunked heads were 1.18x faster at d4096 (stop 44): kAttnKernelsPrefetch takes them from
// kPrefetchMinCells.
constexpr int64_t kHeadsSmallMinCells = 8192;
// kAttnKernelsPrefetch's groups_min_cells and heads_small_min_cells: at d0 / d128 its K walk and V heads form ran a
// SmolLM2 token 2-3 % / 1-2 % slower than the per-kv-head dots and per-pair V (whose fused accumulate_reduce_f16
// takes up to 128 cells), level from d512, 1.44x at d4096 (stop 44).
constexpr int64_t kPrefetchMinCells = 512;
// Four heads of a kv head (Llama-3.2-1B) take the heads form at every depth (heads_small4_min_cells 0): at d4096
// the per-pair V read the 512 KiB slice set four times, and bench_attn_decode's vside ran 504-579 us per pair against
// 423-454 us with four heads a pass (docs/perf "Stop 24, att").

// Heads per pass of the decode's heads forms (dots_f16_heads, accumulate_f16_heads) for `left` heads of a kv head:
// four (Llama-3.2-1B's group, once 2 + 2: its K and V slices read twice), three (SmolLM2), else two, then one.
int64_t heads_per_pass(int64_t left) { return left % 4 == 0 ? 4 : left % 3 == 0 ? 3 : left >= 2 ? 2 : 1; }

__mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

__m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

float dot_f16_lanes16(const uint16_t* k, const float* q, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(load16(k + i), _mm512_loadu_ps(q + i), acc);
  return _mm512_reduce_add_ps(acc);
}

float dot_f16_vec(const uint16_t* k, const float* q, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < np; i += 64) {
    a0 = _mm512_fmadd_ps(load16(k + i), _mm512_loadu_ps(q + i), a0);
    a1 = _mm512_fmadd_ps(load16(k + i + 16), _mm512_loadu_ps(q + i + 16), a1);
    a2 = _mm512_fmadd_ps(load16(k + i + 32), _mm512_loadu_ps(q + i + 32), a2);
    a3 = _mm512_fmadd_ps(load16(k + i + 48), _mm512_loadu_ps(q + i + 48), a3);
  }
  double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (int64_t i = np; i < n; ++i) s += double(_cvtsh_ss(k[i]) * q[i]);
  return float(s);
}

void axpy_f16(float p, const uint16_t* v, float* acc, int64_t n) {
  const __m512 pv = _mm512_set1_ps(p);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, v + i));
    _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(x, pv, _mm512_maskz_loadu_ps(m, acc + i)));
  }
}

// Four cells at a time: independent accumulators hide the FMA latency and
// the reductions; each cell's arithmetic is dot_f16_lanes16's.
void dots_f16(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t dk,
              bool lanes16, float* out) {
  auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r]) * k_stride); };
  int64_t r = 0;
  if (lanes16)
    for (; r + 4 <= n; r += 4) {
      const uint16_t *k0 = row(r), *k1 = row(r + 1), *k2 = row(r + 2), *k3 = row(r + 3);
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < dk; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
        a0 = _mm512_fmadd_ps(load16(k0 + i), qv, a0);
        a1 = _mm512_fmadd_ps(load16(k1 + i), qv, a1);
        a2 = _mm512_fmadd_ps(load16(k2 + i), qv, a2);
        a3 = _mm512_fmadd_ps(load16(k3 + i), qv, a3);
      }
      out[r] = _mm512_reduce_add_ps(a0);
      out[r + 1] = _mm512_reduce_add_ps(a1);
      out[r + 2] = _mm512_reduce_add_ps(a2);
      out[r + 3] = _mm512_reduce_add_ps(a3);
    }
  // ggml_vec_dot_f16 order without a tail (dk % 64 == 0, so the double sum is the float one): four cells at
  // a time, each combined (a0 + a2) + (a1 + a3), and sixteen cells reduced at once by reduce16x16.
  if (!lanes16 && dk % 64 == 0)
    for (; r + 16 <= n; r += 16) {
      __m512 comb[16];
      for (int g = 0; g < 16; g += 4) {
        const uint16_t* kr[4] = {row(r + g), row(r + g + 1), row(r + g + 2), row(r + g + 3)};
        __m512 a[4][4];
        for (auto& c : a)
          for (auto& x : c) x = _mm512_setzero_ps();
        for (int64_t i = 0; i < dk; i += 64)
          for (int u = 0; u < 4; ++u) {
            const __m512 qv = _mm512_loadu_ps(q + i + 16 * u);
            for (int c = 0; c < 4; ++c) a[c][u] = _mm512_fmadd_ps(load16(kr[c] + i + 16 * u), qv, a[c][u]);
          }
        for (int c = 0; c < 4; ++c)
          comb[g + c] = _mm512_add_ps(_mm512_add_ps(a[c][0], a[c][2]), _mm512_add_ps(a[c][1], a[c][3]));
      }
      _mm512_storeu_ps(out + r, _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(comb)));
    }
  for (; r < n; ++r) out[r] = lanes16 ? dot_f16_lanes16(row(r), q, dk) : dot_f16_vec(row(r), q, dk);
}

// The query heads of one kv head over their K rows (decode, -fa 0): each K vector is widened once and feeds H
// heads' accumulators, so a kv head's K slice is loaded and converted once instead of once per head. For C cells
// side by side (each q vector loaded once for them), comb[h * ld + c] is head h's ggml_vec_dot_f16 accumulators
// for cell c over the row's first np (a multiple of 64) elements, combined (a0 + a2) + (a1 + a3) as dot_f16_vec.
template <int H, int C>
[[gnu::always_inline]] inline void vec_combs(const uint16_t* const* kr, const float* q, int64_t ldq, int64_t np,
                                             __m512* comb, int64_t ld) {
  __m512 a[C][H][4];
  for (auto& x : a)
    for (auto& y : x)
      for (auto& z : y) z = _mm512_setzero_ps();
  for (int64_t i = 0; i < np; i += 64)
    for (int u = 0; u < 4; ++u) {
      __m512 x[C];
      for (int c = 0; c < C; ++c) x[c] = load16(kr[c] + i + 16 * u);
      for (int h = 0; h < H; ++h) {
        const __m512 qv = _mm512_loadu_ps(q + h * ldq + i + 16 * u);
        for (int c = 0; c < C; ++c) a[c][h][u] = _mm512_fmadd_ps(x[c], qv, a[c][h][u]);
      }
    }
  for (int c = 0; c < C; ++c)
    for (int h = 0; h < H; ++h)
      comb[h * ld + c] = _mm512_add_ps(_mm512_add_ps(a[c][h][0], a[c][h][2]), _mm512_add_ps(a[c][h][1], a[c][h][3]));
}

// vec_combs for a dk of one step (64): each of a cell's four accumulators is a single product (an FMA from +0), so
// a head's comb is taken right after its four products and only the C cells' 4 C K vectors stay in registers (four
// heads x two cells of vec_combs' form would hold 32 accumulators).
template <int H, int C>
[[gnu::always_inline]] inline void vec_combs64(const uint16_t* const* kr, const float* q, int64_t ldq, __m512* comb,
                                               int64_t ld) {
  __m512 x[C][4];
  for (int c = 0; c < C; ++c)
    for (int u = 0; u < 4; ++u) x[c][u] = load16(kr[c] + 16 * u);
  for (int h = 0; h < H; ++h) {
    __m512 qv[4];
    for (int u = 0; u < 4; ++u) qv[u] = _mm512_loadu_ps(q + h * ldq + 16 * u);
    for (int c = 0; c < C; ++c) {
      __m512 a[4];
      for (int u = 0; u < 4; ++u) a[u] = _mm512_fmadd_ps(x[c][u], qv[u], _mm512_setzero_ps());
      comb[h * ld + c] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
    }
  }
}

// dots_f16 for H heads: tinyBLAS's one accumulator per head and cell, or ggml_vec_dot_f16's four, two cells at a
// time (one at a time for four heads beyond dk 64: 16 accumulators), with sixteen cells reduced at once per head
// (reduce16x16) and the rest as dot_f16_vec (its double tail per head).
template <int H>
void dots_heads(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t ldq,
                int64_t dk, bool lanes16, float* out, int64_t ldo) {
  auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r]) * k_stride); };
  if (lanes16) {
    for (int64_t r = 0; r < n; ++r) {
      const uint16_t* kr = row(r);
      __m512 a[H];
      for (auto& x : a) x = _mm512_setzero_ps();
      for (int64_t i = 0; i < dk; i += 16) {
        const __m512 x = load16(kr + i);
        for (int h = 0; h < H; ++h) a[h] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q + h * ldq + i), a[h]);
      }
      for (int h = 0; h < H; ++h) out[h * ldo + r] = _mm512_reduce_add_ps(a[h]);
    }
    return;
  }
  const int64_t np = dk & ~int64_t(63);
  int64_t r = 0;
  constexpr int kCells = H >= 4 ? 1 : 2;
  if (np == dk)
    for (; r + 16 <= n; r += 16) {
      __m512 comb[H][16];
      if (dk == 64)
        for (int j = 0; j < 16; j += 2) {
          const uint16_t* kr[2] = {row(r + j), row(r + j + 1)};
          vec_combs64<H, 2>(kr, q, ldq, &comb[0][j], 16);
        }
      else
        for (int j = 0; j < 16; j += kCells) {
          const uint16_t* kr[2] = {row(r + j), row(r + j + kCells - 1)};
          vec_combs<H, kCells>(kr, q, ldq, np, &comb[0][j], 16);
        }
      for (int h = 0; h < H; ++h)
        _mm512_storeu_ps(out + h * ldo + r, _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(comb[h])));
    }
  for (; r < n; ++r) {
    const uint16_t* kr = row(r);
    __m512 c[H];
    vec_combs<H, 1>(&kr, q, ldq, np, c, 1);
    for (int h = 0; h < H; ++h) {
      double s = _mm512_reduce_add_ps(c[h]);
      for (int64_t i = np; i < dk; ++i) s += double(_cvtsh_ss(kr[i]) * q[h * ldq + i]);
      out[h * ldo + r] = float(s);
    }
  }
}

// Four, three or two heads at once (2 cells x 3 heads x 4 accumulators, two K vectors and a q vector within the 32
// registers; at dk 64 two cells' K vectors and one head's products at a time). Four: Llama-3.2-1B's group, which
// went 2 + 2 and read its kv head's K slice twice.
void dots_f16_heads(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t ldq,
                    int64_t m, int64_t dk, bool lanes16, float* out, int64_t ldo) {
  for (int64_t h = 0; h < m;) {
    const int64_t left = m - h, take = heads_per_pass(left);
    const float* qh = q + h * ldq;
    float* oh = out + h * ldo;
    if (take == 4) dots_heads<4>(k, k_stride, cells, n, qh, ldq, dk, lanes16, oh, ldo);
    else if (take == 3) dots_heads<3>(k, k_stride, cells, n, qh, ldq, dk, lanes16, oh, ldo);
    else if (take == 2) dots_heads<2>(k, k_stride, cells, n, qh, ldq, dk, lanes16, oh, ldo);
    else dots_f16(k, k_stride, cells, n, qh, dk, lanes16, oh);
    h += take;
  }
}

// dots_heads' 16-cell step (ggml_vec_dot_f16's order, dk a multiple of 64, two cells at a time, one for four heads
// beyond dk 64) for `groups` kv heads of H heads each, row by row: each row is taken whole, every kv head's slice
// meeting its heads in turn, and the rows kRowsAhead cells on are prefetched whole into L2 (up to n_left); then each
// head's 16 cells are reduced as dots_heads reduces them. Every (head, cell) dot is dots_heads' (the same bits).
// Into L2, not L1 (stop 49): Qwen3's 16 rows ahead are 32 KiB, which with the block's own rows and its 16 KiB of
// combs do not fit a 48 KiB L1. On the Intel Xeon at d4096, old / new in one process: a two-thread split's K pass
// 1.07-1.14x (Qwen3-0.6B, Llama-3.2-1B), the whole decode ATTENTION node 1.03-1.06x at one and two threads,
// SmolLM2's (384-byte rows) 0.99-1.01x; the K pass without the prefetch 0.78-0.86x, 8 or 32 rows ahead into L1 level.
constexpr int64_t kRowsMaxHeads = 32;  // heads of a token that dots_groups_rows16 holds (16 x 64 bytes each)
constexpr int64_t kRowsAhead = 16;     // cells between a row's prefetch and its dots
template <int H>
void dots_groups_rows16(const uint8_t* k, uint64_t k_stride, uint64_t group_bytes, const int32_t* cells, int64_t n_left,
                        const float* q, int64_t ldq, int64_t groups, int64_t dk, float* out, int64_t ldo) {
  auto row = [&](int64_t r) { return k + uint64_t(cells[r]) * k_stride; };
  constexpr int kCells = H >= 4 ? 1 : 2;
  const int step = dk == 64 ? 2 : kCells;
  const uint64_t span = uint64_t(groups) * group_bytes;
  __m512 comb[kRowsMaxHeads][16];
  for (int j = 0; j < 16; j += step) {
    for (int u = 0; u < step; ++u)
      if (j + u + kRowsAhead < n_left)
        for (uint64_t b = 0; b < span; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row(j + u + kRowsAhead)) + b, _MM_HINT_T1);
    for (int64_t g = 0; g < groups; ++g) {
      const uint64_t off = uint64_t(g) * group_bytes;
      const uint16_t* kr[2] = {reinterpret_cast<const uint16_t*>(row(j) + off),
                               reinterpret_cast<const uint16_t*>(row(j + step - 1) + off)};
      if (dk == 64) vec_combs64<H, 2>(kr, q + g * H * ldq, ldq, &comb[g * H][j], 16);
      else vec_combs<H, kCells>(kr, q + g * H * ldq, ldq, dk, &comb[g * H][j], 16);
    }
  }
  for (int64_t h = 0; h < groups * H; ++h)
    _mm512_storeu_ps(out + h * ldo, _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(comb[h])));
}

// dots_f16_heads for `groups` kv heads of m heads each, their K slices group_bytes apart in a row (a one-thread
// decode's whole token), so K is read once, whole rows in address order, instead of once per kv head as a slice of
// every row (a third of SmolLM2's 384-byte rows' lines, an eighth of Llama-3.2-1B's 1 KiB rows', a quarter of
// Qwen3's 2 KiB rows': strided walks that an Intel core's prefetchers do not run ahead of). In ggml_vec_dot_f16's
// order with 2-4 heads a kv head and up to kRowsMaxHeads in all, whole 16s of cells row by row (dots_groups_rows16,
// stop 45: a token at d4096 on an Intel Xeon, against stop 44's 16-cell steps of kv head after kv head: SmolLM2
// 1.11-1.15x, Llama-3.2-1B 1.02x, Qwen3 1.03-1.05x against its staged 64-cell steps; the row walk without its
// prefetch: 1.00-1.03x; stop 44's kv-head steps with a prefetch 12 KiB on: level); else, and for the last cells, 16
// cells at a time, every kv head's dots_f16_heads on them while the rows are in L1. Every (head, cell) dot is
// dots_f16_heads' (runs of whole 16s: the same bits). kAttnKernelsPrefetch takes it.
void dots_f16_groups(const uint8_t* k, uint64_t k_stride, uint64_t group_bytes, const int32_t* cells, int64_t n,
                     const float* q, int64_t ldq, int64_t groups, int64_t m, int64_t dk, bool lanes16, float* out,
                     int64_t ldo) {
  const bool rows =
      !lanes16 && dk % 64 == 0 && groups * m <= kRowsMaxHeads && m >= 2 && m <= 4 && heads_per_pass(m) == m;
  int64_t c0 = 0;
  for (; rows && c0 + 16 <= n; c0 += 16) {
    const int32_t* cc = cells + c0;
    if (m == 2) dots_groups_rows16<2>(k, k_stride, group_bytes, cc, n - c0, q, ldq, groups, dk, out + c0, ldo);
    else if (m == 3) dots_groups_rows16<3>(k, k_stride, group_bytes, cc, n - c0, q, ldq, groups, dk, out + c0, ldo);
    else dots_groups_rows16<4>(k, k_stride, group_bytes, cc, n - c0, q, ldq, groups, dk, out + c0, ldo);
  }
  for (; c0 < n; c0 += 16) {
    const int64_t nn = std::min<int64_t>(16, n - c0);
    for (int64_t g = 0; g < groups; ++g)
      dots_f16_heads(k + uint64_t(g) * group_bytes, k_stride, cells + c0, nn, q + g * m * ldq, ldq, m, dk, lanes16,
                     out + g * m * ldo + c0, ldo);
  }
}

// Lane by lane: the accumulator row of lane l stays in registers while the
// cells l, l + lanes, l + 2 lanes, ... are added in order (the same sequence
// of FMAs per element as one axpy per cell), 128 elements at a time.
// Four lanes side by side (4 C independent FMA chains, adjacent cells) for up to 16 C elements at a time; whole
// 16s of columns (64, or 16-48 for a column part of the decode split) take C unmasked registers.
template <int C, bool Masked>
void accumulate_f16_lanes4_cols(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                                int64_t lanes, int64_t l0, int64_t i0, int64_t len, int64_t dv, float* acc) {
  // Whole 64 columns take unmasked loads: with masked ones GCC 12 kept some accumulators in memory.
  __mmask16 mk[C];
  for (int j = 0; j < C; ++j)
    mk[j] = !Masked ? __mmask16(0xFFFF) : 16 * j < len ? tail_mask(len - 16 * j) : __mmask16(0);
  __m512 reg[4][C];
  for (int u = 0; u < 4; ++u)
    for (int j = 0; j < C; ++j) {
      const float* a = acc + (l0 + u) * dv + i0 + 16 * j;
      reg[u][j] = Masked ? _mm512_maskz_loadu_ps(mk[j], a) : _mm512_loadu_ps(a);
    }
  for (int64_t base = l0; base < n; base += lanes)
    for (int u = 0; u < 4; ++u) {
      const int64_t r = base + u;
      if (r >= n) break;
      const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0;
      const __m512 pv = _mm512_set1_ps(p[r]);
      for (int j = 0; j < C; ++j) {
        const __m256i h = Masked ? _mm256_maskz_loadu_epi16(mk[j], vr + 16 * j)
                                 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + 16 * j));
        reg[u][j] = _mm512_fmadd_ps(_mm512_cvtph_ps(h), pv, reg[u][j]);
      }
    }
  for (int u = 0; u < 4 && l0 + u < n; ++u)
    for (int j = 0; j < C; ++j) {
      float* a = acc + (l0 + u) * dv + i0 + 16 * j;
      if (Masked) _mm512_mask_storeu_ps(a, mk[j], reg[u][j]);
      else _mm512_storeu_ps(a, reg[u][j]);
    }
}

void accumulate_f16_lanes4(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                           int64_t lanes, int64_t l0, int64_t dv, float* acc) {
  for (int64_t i0 = 0; i0 < dv; i0 += 64) {
    const int64_t len = dv - i0 < 64 ? dv - i0 : 64;
    if (len == 64) accumulate_f16_lanes4_cols<4, false>(p, v, v_stride, cells, n, lanes, l0, i0, len, dv, acc);
    else if (len == 48) accumulate_f16_lanes4_cols<3, false>(p, v, v_stride, cells, n, lanes, l0, i0, len, dv, acc);
    else if (len == 32) accumulate_f16_lanes4_cols<2, false>(p, v, v_stride, cells, n, lanes, l0, i0, len, dv, acc);
    else if (len == 16) accumulate_f16_lanes4_cols<1, false>(p, v, v_stride, cells, n, lanes, l0, i0, len, dv, acc);
    else accumulate_f16_lanes4_cols<4, true>(p, v, v_stride, cells, n, lanes, l0, i0, len, dv, acc);
  }
}

void accumulate_f16(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n, int64_t lanes,
                    int64_t dv, float* acc) {
  constexpr int kRegs = 8;
  int64_t l = 0;
  if (lanes % 4 == 0)
    for (; l + 4 <= lanes && l + 4 <= n; l += 4) accumulate_f16_lanes4(p, v, v_stride, cells, n, lanes, l, dv, acc);
  for (; l < lanes && l < n; ++l)
    for (int64_t i0 = 0; i0 < dv; i0 += 16 * kRegs) {
      float* a = acc + l * dv + i0;
      const int64_t len = dv - i0 < 16 * kRegs ? dv - i0 : 16 * kRegs;
      __m512 reg[kRegs];
      for (int j = 0; j < kRegs; ++j)
        if (16 * j < len) reg[j] = _mm512_maskz_loadu_ps(tail_mask(len - 16 * j), a + 16 * j);
      for (int64_t r = l; r < n; r += lanes) {
        const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0;
        const __m512 pv = _mm512_set1_ps(p[r]);
        for (int j = 0; j < kRegs; ++j)
          if (16 * j < len) {
            const __mmask16 m = tail_mask(len - 16 * j);
            reg[j] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, vr + 16 * j)), pv, reg[j]);
          }
      }
      for (int j = 0; j < kRegs; ++j)
        if (16 * j < len) _mm512_mask_storeu_ps(a + 16 * j, tail_mask(len - 16 * j), reg[j]);
    }
}

// The query heads of one kv head over their V rows (decode, -fa 0): H heads x C vectors of 16 columns of lane l
// in registers over the lane's cells r0, r0 + lanes, ... below r1 (r0 % lanes == l) in order; each V vector is
// widened once and feeds H FMAs (one per head), so every head gets accumulate_f16's FMAs, in its order, and a kv
// head's V slice is read once instead of once per head. With ahead > 0 the tile's columns of the row `ahead`
// cells on are prefetched (the next chunk's rows of this lane, see accumulate_heads).
template <int H, int C>
void accumulate_heads_tile(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells,
                           int64_t r0, int64_t r1, int64_t n, int64_t lanes, int64_t l, int64_t i0, int64_t dv,
                           int64_t ahead, float* acc) {
  const int64_t ld_head = lanes * dv;
  __m512 reg[H][C];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < C; ++j) reg[h][j] = _mm512_loadu_ps(acc + h * ld_head + l * dv + i0 + 16 * j);
  for (int64_t r = r0; r < r1; r += lanes) {
    if (ahead > 0 && r + ahead < n) {
      const uint8_t* next = v + uint64_t(cells[r + ahead]) * v_stride + uint64_t(i0) * 2;
      for (int b = 0; b < C * 32; b += 64) _mm_prefetch(reinterpret_cast<const char*>(next + b), _MM_HINT_T1);
    }
    const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0;
    __m512 x[C];
    for (int j = 0; j < C; ++j) x[j] = load16(vr + 16 * j);
    for (int h = 0; h < H; ++h) {
      const __m512 pv = _mm512_set1_ps(p[h * ldp + r]);
      for (int j = 0; j < C; ++j) reg[h][j] = _mm512_fmadd_ps(x[j], pv, reg[h][j]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < C; ++j) _mm512_storeu_ps(acc + h * ld_head + l * dv + i0 + 16 * j, reg[h][j]);
}

// Lane l's cells r0, r0 + lanes, ... below c1 for H heads, the columns in tiles of up to 16 x kMaxC (dv % 16 == 0):
// H x C accumulators, C widened vectors and a broadcast within the 32 registers.
template <int H>
void accumulate_lane_tiles(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells,
                           int64_t r0, int64_t c1, int64_t n, int64_t lanes, int64_t l, int64_t dv, int64_t ahead,
                           float* acc) {
  constexpr int kMaxC = H <= 2 ? 8 : 4;
  for (int64_t i0 = 0; i0 < dv;) {
    const int64_t vecs = (dv - i0) / 16;
    if (vecs >= kMaxC) {
      accumulate_heads_tile<H, kMaxC>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, i0, dv, ahead, acc);
      i0 += 16 * kMaxC;
    } else if (vecs >= 4) {
      accumulate_heads_tile<H, 4>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, i0, dv, ahead, acc);
      i0 += 64;
    } else if (vecs >= 2) {
      accumulate_heads_tile<H, 2>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, i0, dv, ahead, acc);
      i0 += 32;
    } else {
      accumulate_heads_tile<H, 1>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, i0, dv, ahead, acc);
      i0 += 16;
    }
  }
}

// H heads, every lane with a cell. The cells go in chunks of kHeadsChunkCells (a multiple of lanes): lane by lane
// within a chunk, while each lane's tile prefetches its rows of the next chunk, so a chunk's rows come from L2 (a
// lane's cells are lanes rows apart, a stride no hardware prefetcher follows from DRAM) and a tile's accumulators
// are loaded and stored once per lane and chunk. Each lane's cells stay in order.
template <int H>
void accumulate_heads(const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                      int64_t lanes, int64_t dv, float* acc) {
  constexpr int64_t chunk = kHeadsChunkCells;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk), ahead = c1 < n ? chunk : 0;
    for (int64_t l = 0; l < lanes && c0 + l < c1; ++l)
      accumulate_lane_tiles<H>(p, ldp, v, v_stride, cells, c0 + l, c1, n, lanes, l, dv, ahead, acc);
  }
}

// A run of `take` heads (heads_per_pass) of one lane: accumulate_lane_tiles<take>.
void accumulate_lane_heads(int64_t take, const float* p, int64_t ldp, const uint8_t* v, uint64_t v_stride,
                           const int32_t* cells, int64_t r0, int64_t c1, int64_t n, int64_t lanes, int64_t l,
                           int64_t dv, float* acc) {
  if (take == 4) accumulate_lane_tiles<4>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, dv, 0, acc);
  else if (take == 3) accumulate_lane_tiles<3>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, dv, 0, acc);
  else if (take == 2) accumulate_lane_tiles<2>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, dv, 0, acc);
  else accumulate_lane_tiles<1>(p, ldp, v, v_stride, cells, r0, c1, n, lanes, l, dv, 0, acc);
}

// accumulate_f16_heads for every kv head of a token at once (the decode where the decode prefetches): the cells in
// chunks of about kGroupsChunkBytes of whole rows, lane by lane within a chunk, and each lane's rows of the chunk
// (chunk / lanes of them, lanes rows apart) walked by every kv head's tiles in turn while they sit in L1. So the
// V rows are read whole, each once, a chunk at a time in address order, with no software prefetch (the hardware's
// follows whole rows): on an Intel Xeon at d4096, one thread, Qwen3's V side (2 KiB rows) took 1.22x less time than
// accumulate_f16_heads kv head by kv head, Llama-3.2-1B's (1 KiB) 1.2x less (chunks of 256 or 512 cells were best,
// 64 and 1024 slower; prefetching the next chunk's rows as accumulate_heads does was slower). Each lane's cells
// stay in order for every head: the same FMAs and bits.
constexpr uint64_t kGroupsChunkBytes = 512 << 10;
void accumulate_f16_groups(const float* p, int64_t ldp, int64_t groups, int64_t m, const uint8_t* v, uint64_t v_stride,
                           uint64_t group_bytes, const int32_t* cells, int64_t n, int64_t lanes, int64_t lane_begin,
                           int64_t lane_end, int64_t dv, float* acc) {
  const int64_t ld_head = lanes * dv;
  if (dv % 16 != 0) {  // masked columns: kv head by kv head, one head at a time
    if (lane_begin != 0 || lane_end < lanes) fail("accumulate_f16_groups: a part of the lanes needs dv % 16 == 0");
    for (int64_t j = 0; j < groups * m; ++j)
      accumulate_f16(p + j * ldp, v + j / m * group_bytes, v_stride, cells, n, lanes, dv, acc + j * ld_head);
    return;
  }
  const uint64_t span = uint64_t(groups) * group_bytes;
  const int64_t chunk =
      std::max<int64_t>(lanes, int64_t(kGroupsChunkBytes / std::max<uint64_t>(span, 1)) / lanes * lanes);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    for (int64_t l = lane_begin; l < std::min(lanes, lane_end) && c0 + l < c1; ++l)
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t h = 0; h < m;) {
          const int64_t take = heads_per_pass(m - h), j = g * m + h;
          accumulate_lane_heads(take, p + j * ldp, ldp, v + g * group_bytes, v_stride, cells, c0 + l, c1, n, lanes, l,
                                dv, acc + j * ld_head);
          h += take;
        }
  }
}

void accumulate_f16_heads(const float* p, int64_t ldp, int64_t nh, const uint8_t* v, uint64_t v_stride,
                          const int32_t* cells, int64_t n, int64_t lanes, int64_t dv, float* acc) {
  const int64_t ld_head = lanes * dv;
  if (dv % 16 != 0) {  // masked columns: one head at a time
    for (int64_t h = 0; h < nh; ++h) accumulate_f16(p + h * ldp, v, v_stride, cells, n, lanes, dv, acc + h * ld_head);
    return;
  }
  for (int64_t h = 0; h < nh;) {
    const int64_t take = heads_per_pass(nh - h);
    float* a = acc + h * ld_head;
    if (take == 4) accumulate_heads<4>(p + h * ldp, ldp, v, v_stride, cells, n, lanes, dv, a);
    else if (take == 3) accumulate_heads<3>(p + h * ldp, ldp, v, v_stride, cells, n, lanes, dv, a);
    else if (take == 2) accumulate_heads<2>(p + h * ldp, ldp, v, v_stride, cells, n, lanes, dv, a);
    else accumulate_heads<1>(p + h * ldp, ldp, v, v_stride, cells, n, lanes, dv, a);
    h += take;
  }
}

// llama_order::expf_avx512 on 16 lanes: the same FMAs (fnmadd = fma(-n, c, x)),
// vscalefps for j * 2^n, and 0 / inf where |n| > 192.
__m512 expf16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  if (!big) return res;
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                          _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(big, res, alt);
}

double softmax_exp(float* s, int64_t n, float mx) {
  const __m512 m = _mm512_set1_ps(mx);
  double sum = 0.0;
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 v = _mm512_loadu_ps(s + c);
    const __mmask16 live = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    const __m512 e = _mm512_maskz_mov_ps(live, expf16(_mm512_sub_ps(v, m)));
    _mm512_storeu_ps(s + c, e);
    sum += double(_mm512_reduce_add_ps(e));
  }
  return sum;
}

// accumulate_f16 (64 lanes, from zero) and reduce_lanes at once, 16 columns at a time: the 16 partial sums t[l] of
// reduce_lanes' first step each take lanes l, l + 32, l + 16 and l + 48, whose FMA chains run in registers over
// the lane's cells (r = lane, lane + 64, ...) in order; a lane without cells is +0, as reduce_lanes reads a lane
// past `used`. Then reduce_lanes' tree on the 16 registers.
void accumulate_reduce_f16(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                           int64_t dv, float* out) {
  constexpr int64_t kLanes = 64;
  for (int64_t i0 = 0; i0 < dv; i0 += 16) {
    auto chain = [&](int64_t lane) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t r = lane; r < n; r += kLanes)
        acc = _mm512_fmadd_ps(load16(reinterpret_cast<const uint16_t*>(v + uint64_t(cells[r]) * v_stride) + i0),
                              _mm512_set1_ps(p[r]), acc);
      return acc;
    };
    __m512 t[16];
    for (int l = 0; l < 16; ++l)
      t[l] = _mm512_add_ps(_mm512_add_ps(chain(l), chain(32 + l)), _mm512_add_ps(chain(16 + l), chain(48 + l)));
    for (int l = 0; l < 8; ++l) t[l] = _mm512_add_ps(t[l], t[l + 8]);
    for (int l = 0; l < 4; ++l) t[l] = _mm512_add_ps(t[l], t[l + 4]);
    _mm512_storeu_ps(out + i0, _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3])));
  }
}

// 16 outputs at a time; every output sees exactly the scalar form's adds.
void reduce_lanes(const float* acc, int64_t lanes, int64_t used, int64_t dv, float* out) {
  for (int64_t i = 0; i < dv; i += 16) {
    const __mmask16 m = tail_mask(dv - i);
    auto at = [&](int64_t lane) {
      return lane < used ? _mm512_maskz_loadu_ps(m, acc + lane * dv + i) : _mm512_setzero_ps();
    };
    __m512 t[16];
    for (int l = 0; l < 16; ++l)
      t[l] =
          lanes == 16 ? at(l) : _mm512_add_ps(_mm512_add_ps(at(l), at(32 + l)), _mm512_add_ps(at(16 + l), at(48 + l)));
    for (int l = 0; l < 8; ++l) t[l] = _mm512_add_ps(t[l], t[l + 8]);
    for (int l = 0; l < 4; ++l) t[l] = _mm512_add_ps(t[l], t[l + 4]);
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3])));
  }
}

void to_f16(const float* x, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

// One f16 row of d values widened to f32.
void widen_row(const uint8_t* row, int64_t d, float* out) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(row);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) _mm512_storeu_ps(out + i, load16(src + i));
  if (i < d) {
    const __mmask16 m = tail_mask(d - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

void widen_f16(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < n; ++r) {
    widen_row(base + uint64_t(cells[r]) * stride, d, dst + r * ld);
  }
}

// One query row (decode with a quantized K): 16 cells x 1 query, the sixteen
// accumulators reduced at once; each dot's arithmetic is the 4 x 4 tile's.
// A short last tile repeats its last row and drops the extra results.
void dots_f32_lanes16_one(const float* k, int64_t ldk, int64_t n, const float* q, int64_t dk, float* out) {
  for (int64_t r0 = 0; r0 < n; r0 += 16) {
    const int64_t nc = n - r0 < 16 ? n - r0 : 16;
    const float* kr[16];
    for (int c = 0; c < 16; ++c) kr[c] = k + (r0 + (c < nc ? c : nc - 1)) * ldk;
    __m512 a[16];
    for (auto& x : a) x = _mm512_setzero_ps();
    for (int64_t i = 0; i < dk; i += 16) {
      const __m512 qv = _mm512_loadu_ps(q + i);
      for (int c = 0; c < 16; ++c) a[c] = _mm512_fmadd_ps(_mm512_loadu_ps(kr[c] + i), qv, a[c]);
    }
    __m512 t[16];  // reduce16x16 takes a copy: passing a itself kept the accumulators in memory (GCC 12)
    for (int c = 0; c < 16; ++c) t[c] = a[c];
    _mm512_mask_storeu_ps(out + r0, tail_mask(nc), _mm512_permutexvar_ps(reduce_to_rows(), reduce16x16(t)));
  }
}

// The dots of 4 cells (r0 ..) for nq <= 4 queries, query j's in lanes 4j .. 4j+3 of res, stored into each
// query's row of out (stride ldo), only the cells that query sees (n[j] of them).
void store_query_rows(__m512 res, const int64_t* n, int nq, int64_t r0, float* out, int64_t ldo) {
  for (int j = 0; j < nq; ++j) {
    const int64_t left = n[j] - r0;
    if (left <= 0) continue;
    const __m128 row = j == 0   ? _mm512_castps512_ps128(res)
                       : j == 1 ? _mm512_extractf32x4_ps(res, 1)
                       : j == 2 ? _mm512_extractf32x4_ps(res, 2)
                                : _mm512_extractf32x4_ps(res, 3);
    _mm_mask_storeu_ps(out + j * ldo + r0, __mmask8((1u << (left < 4 ? left : 4)) - 1), row);
  }
}

void transpose16x16(__m512* r);  // below, with round_p_lanes

// Transposed K (dk <= kColsMaxDk): the rows of 32 cells transposed once into kt ([dk][32], zeros past the last
// cell), then tiles of Q <= 2 queries x 32 cells in which one register holds one lane's accumulator (dims l,
// l + 16, ...: dot_f16_lanes16's FMA chain) for 16 cells. reduce_add16's tree is then adds between registers
// (t = a[l] + a[l + 8], u = t[l] + t[l + 4], (u0 + u2) + (u1 + u3)), taken lane pair by lane pair so that few
// partial sums are live, and a register of 16 finished dots goes straight into its query's row: no shuffle per
// dot (the 4 x 4 tiles spent ~30 vector ops reducing and storing 16 dots against 64 FMAs at dk 64).
constexpr int64_t kColsMaxDk = 256;
constexpr int64_t kColsCells = 32;

// The lanes l and l + 8 of Q queries' dots with the 32 cells of kt, added: reduce_add16's first step.
template <int DK, int Q>
[[gnu::always_inline]] inline void lane_pair(const float* kt, const float* const* qr, int l, int64_t dk_rt,
                                             __m512 (&t)[Q][2]) {
  const int64_t dk = DK ? DK : dk_rt;
  __m512 a[Q][2], b[Q][2];
  for (int j = 0; j < Q; ++j) a[j][0] = a[j][1] = b[j][0] = b[j][1] = _mm512_setzero_ps();
  for (int64_t s = 0; s < dk; s += 16) {
    const float* ka = kt + (s + l) * kColsCells;
    const float* kb = ka + 8 * kColsCells;
    __m512 ka0 = _mm512_load_ps(ka), ka1 = _mm512_load_ps(ka + 16);
    __m512 kb0 = _mm512_load_ps(kb), kb1 = _mm512_load_ps(kb + 16);
    asm("" : "+v"(ka0), "+v"(ka1), "+v"(kb0), "+v"(kb1));  // one load per vector, not one per FMA (GCC 12)
    for (int j = 0; j < Q; ++j) {
      const __m512 qa = _mm512_set1_ps(qr[j][s + l]), qb = _mm512_set1_ps(qr[j][s + l + 8]);
      a[j][0] = _mm512_fmadd_ps(ka0, qa, a[j][0]);
      a[j][1] = _mm512_fmadd_ps(ka1, qa, a[j][1]);
      b[j][0] = _mm512_fmadd_ps(kb0, qb, b[j][0]);
      b[j][1] = _mm512_fmadd_ps(kb1, qb, b[j][1]);
    }
  }
  for (int j = 0; j < Q; ++j)
    for (int c = 0; c < 2; ++c) t[j][c] = _mm512_add_ps(a[j][c], b[j][c]);
}

// u of the lanes l, l + 4 (and their + 8s): reduce_add16's second step.
template <int DK, int Q>
[[gnu::always_inline]] inline void lane_quad(const float* kt, const float* const* qr, int l, int64_t dk,
                                             __m512 (&u)[Q][2]) {
  __m512 t0[Q][2], t4[Q][2];
  lane_pair<DK, Q>(kt, qr, l, dk, t0);
  lane_pair<DK, Q>(kt, qr, l + 4, dk, t4);
  for (int j = 0; j < Q; ++j)
    for (int c = 0; c < 2; ++c) u[j][c] = _mm512_add_ps(t0[j][c], t4[j][c]);
}

// Q queries (rows qr, each seeing n[j] cells) x the 32 cells from r0 in kt: the finished dots into out's rows.
template <int DK, int Q>
void cols_tile(const float* kt, const float* const* qr, const int64_t* n, int64_t r0, int64_t dk, float* out,
               int64_t ldo) {
  __m512 u0[Q][2], u2[Q][2], e[Q][2];
  lane_quad<DK, Q>(kt, qr, 0, dk, u0);
  lane_quad<DK, Q>(kt, qr, 2, dk, u2);
  for (int j = 0; j < Q; ++j)
    for (int c = 0; c < 2; ++c) e[j][c] = _mm512_add_ps(u0[j][c], u2[j][c]);
  __m512 u1[Q][2], u3[Q][2];
  lane_quad<DK, Q>(kt, qr, 1, dk, u1);
  lane_quad<DK, Q>(kt, qr, 3, dk, u3);
  for (int j = 0; j < Q; ++j)
    for (int c = 0; c < 2; ++c) {
      const int64_t left = n[j] - r0 - 16 * c;
      const __mmask16 mk = left <= 0 ? __mmask16(0) : tail_mask(left);
      const __m512 dot = _mm512_add_ps(e[j][c], _mm512_add_ps(u1[j][c], u3[j][c]));
      _mm512_mask_storeu_ps(out + j * ldo + r0 + 16 * c, mk, dot);
    }
}

// kt[i * 32 + c] = k[(r0 + c) * ldk + i] for c < 32 (0 for r0 + c >= n_max), i < dk.
void transpose_k_cols(const float* k, int64_t ldk, int64_t r0, int64_t n_max, int64_t dk, float* kt) {
  for (int64_t cb = 0; cb < kColsCells; cb += 16)
    for (int64_t i0 = 0; i0 < dk; i0 += 16) {
      __m512 r[16];
      for (int64_t x = 0; x < 16; ++x)
        r[x] = r0 + cb + x < n_max ? _mm512_loadu_ps(k + (r0 + cb + x) * ldk + i0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t d = 0; d < 16; ++d) _mm512_store_ps(kt + (i0 + d) * kColsCells + cb, r[d]);
    }
}

template <int DK>
void dots_f32_lanes16_cols(const float* k, int64_t ldk, const int64_t* n, const float* q, int64_t ldq, int64_t m,
                           int64_t dk, float* out, int64_t ldo, int64_t n_max) {
  alignas(64) float kt[kColsMaxDk * kColsCells];
  for (int64_t r0 = 0; r0 < n_max; r0 += kColsCells) {
    transpose_k_cols(k, ldk, r0, n_max, dk, kt);
    int64_t j0 = 0;
    for (; j0 + 2 <= m; j0 += 2) {
      if (n[j0] <= r0 && n[j0 + 1] <= r0) continue;
      const float* qr[2] = {q + j0 * ldq, q + (j0 + 1) * ldq};
      cols_tile<DK, 2>(kt, qr, n + j0, r0, dk, out + j0 * ldo, ldo);
    }
    if (j0 < m && n[j0] > r0) {
      const float* qr[1] = {q + j0 * ldq};
      cols_tile<DK, 1>(kt, qr, n + j0, r0, dk, out + j0 * ldo, ldo);
    }
  }
}

// Tiles of 4 cells x 4 queries: each k and q vector loaded feeds 4 FMAs, and
// each dot keeps its own single accumulator (dot_f16_lanes16's order). Short
// tiles repeat the last row or query and drop the extra results; a tile of
// queries stops at its longest row.
void dots_f32_lanes16(const float* k, int64_t ldk, const int64_t* n, const float* q, int64_t ldq, int64_t m, int64_t dk,
                      float* out, int64_t ldo) {
  if (m == 1) return dots_f32_lanes16_one(k, ldk, n[0], q, dk, out);
  // lane 4 j + c of the permuted result: query j, cell c
  const __m512i to_rows = _mm512_setr_epi32(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15);
  int64_t n_max = 0;
  for (int64_t j = 0; j < m; ++j) n_max = n[j] > n_max ? n[j] : n_max;
  if (dk == 64) return dots_f32_lanes16_cols<64>(k, ldk, n, q, ldq, m, dk, out, ldo, n_max);
  if (dk == 128) return dots_f32_lanes16_cols<128>(k, ldk, n, q, ldq, m, dk, out, ldo, n_max);
  if (dk <= kColsMaxDk) return dots_f32_lanes16_cols<0>(k, ldk, n, q, ldq, m, dk, out, ldo, n_max);
  for (int64_t r0 = 0; r0 < n_max; r0 += 4) {
    for (int64_t j0 = 0; j0 < m; j0 += 4) {
      const int64_t nq = m - j0 < 4 ? m - j0 : 4;
      int64_t n_tile = 0;
      for (int j = 0; j < nq; ++j) n_tile = n[j0 + j] > n_tile ? n[j0 + j] : n_tile;
      if (n_tile <= r0) continue;
      const int64_t nc = n_tile - r0 < 4 ? n_tile - r0 : 4;
      const float* kr[4];
      for (int c = 0; c < 4; ++c) kr[c] = k + (r0 + (c < nc ? c : nc - 1)) * ldk;
      const float* qr[4];
      for (int j = 0; j < 4; ++j) qr[j] = q + (j0 + (j < nq ? j : nq - 1)) * ldq;
      __m512 a[16];
      for (int x = 0; x < 16; ++x) a[x] = _mm512_setzero_ps();
      for (int64_t i = 0; i < dk; i += 16) {
        const __m512 k0 = _mm512_loadu_ps(kr[0] + i), k1 = _mm512_loadu_ps(kr[1] + i);
        const __m512 k2 = _mm512_loadu_ps(kr[2] + i), k3 = _mm512_loadu_ps(kr[3] + i);
        for (int j = 0; j < 4; ++j) {
          const __m512 qv = _mm512_loadu_ps(qr[j] + i);
          a[4 * j] = _mm512_fmadd_ps(k0, qv, a[4 * j]);
          a[4 * j + 1] = _mm512_fmadd_ps(k1, qv, a[4 * j + 1]);
          a[4 * j + 2] = _mm512_fmadd_ps(k2, qv, a[4 * j + 2]);
          a[4 * j + 3] = _mm512_fmadd_ps(k3, qv, a[4 * j + 3]);
        }
      }
      __m512 t[16];  // a copy, as dots_f32_lanes16_one
      for (int x = 0; x < 16; ++x) t[x] = a[x];
      const __m512 res = _mm512_permutexvar_ps(to_rows, reduce16x16(t));
      store_query_rows(res, n + j0, nq, r0, out + j0 * ldo, ldo);
    }
  }
}

// 64 elements of MQ queries at a time, lane by lane: the lane's
// accumulators stay in registers over its cells (r = l, l + 16, ...), each v
// vector loaded feeds MQ FMAs; cells visible to every query of the tile run
// unmasked, the others with the FMA masked off for the queries that do not
// see them (so each query gets exactly its own FMAs, in the cells' order).
// The 16 lanes then go through reduce_lanes' tree from an L1 buffer. Lanes
// without a cell stay +0, which is what reduce_lanes reads there.
// kKeep (attend_v_lanes16_keep): the accumulators start from acc (query j,
// lane l at acc + (j * 16 + l) * dv) and go back there unreduced, so a block
// walks its cells in chunks with each lane's FMA chain unbroken.
template <int MQ, bool kFull, bool kKeep = false>
void attend_v_tile(const float* p, int64_t ldp, const int64_t* nv, const float* v, int64_t ldv, int64_t lane_rows,
                   int64_t dv, float* const* out, float* acc = nullptr) {
  int64_t lo = nv[0], hi = nv[0];
  for (int j = 1; j < MQ; ++j) {
    lo = nv[j] < lo ? nv[j] : lo;
    hi = nv[j] > hi ? nv[j] : hi;
  }
  alignas(64) float lanes[16][MQ][64];
  for (int64_t i0 = 0; i0 < dv; i0 += 64) {
    const int64_t len = kFull || dv - i0 >= 64 ? 64 : dv - i0;
    __mmask16 mk[4];
    for (int d = 0; d < 4; ++d) mk[d] = kFull ? __mmask16(0xFFFF) : 16 * d < len ? tail_mask(len - 16 * d) : 0;
    for (int64_t l = 0; l < 16; ++l) {
      __m512 a[MQ][4];
      for (int j = 0; j < MQ; ++j)
        for (int d = 0; d < 4; ++d) {
          const float* src = kKeep ? acc + (j * 16 + l) * dv + i0 + 16 * d : nullptr;
          a[j][d] = !kKeep ? _mm512_setzero_ps() : kFull ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(mk[d], src);
        }
      int64_t r = l;
      const float* vr = v + l * lane_rows * ldv + i0;  // the lane's rows in order
      for (; r < lo; r += 16, vr += ldv) {
        __m512 x[4];
        for (int d = 0; d < 4; ++d)
          x[d] = kFull ? _mm512_loadu_ps(vr + 16 * d) : _mm512_maskz_loadu_ps(mk[d], vr + 16 * d);
        for (int j = 0; j < MQ; ++j) {
          const __m512 pj = _mm512_set1_ps(p[j * ldp + r]);
          for (int d = 0; d < 4; ++d) a[j][d] = _mm512_fmadd_ps(x[d], pj, a[j][d]);
        }
      }
      for (; r < hi; r += 16, vr += ldv) {
        __m512 x[4];
        for (int d = 0; d < 4; ++d)
          x[d] = kFull ? _mm512_loadu_ps(vr + 16 * d) : _mm512_maskz_loadu_ps(mk[d], vr + 16 * d);
        for (int j = 0; j < MQ; ++j) {
          const __mmask16 live = r < nv[j] ? __mmask16(0xFFFF) : __mmask16(0);
          const __m512 pj = _mm512_set1_ps(r < nv[j] ? p[j * ldp + r] : 0.0f);
          for (int d = 0; d < 4; ++d) a[j][d] = _mm512_mask3_fmadd_ps(x[d], pj, a[j][d], live);
        }
      }
      for (int j = 0; j < MQ; ++j)
        for (int d = 0; d < 4; ++d) {
          if (!kKeep) _mm512_store_ps(lanes[l][j] + 16 * d, a[j][d]);
          else if (kFull) _mm512_storeu_ps(acc + (j * 16 + l) * dv + i0 + 16 * d, a[j][d]);
          else _mm512_mask_storeu_ps(acc + (j * 16 + l) * dv + i0 + 16 * d, mk[d], a[j][d]);
        }
    }
    if (kKeep) continue;
    for (int j = 0; j < MQ; ++j)
      for (int d = 0; d < 4; ++d) {
        if (16 * d >= len) break;
        __m512 t[8];
        for (int q = 0; q < 8; ++q)
          t[q] = _mm512_add_ps(_mm512_load_ps(lanes[q][j] + 16 * d), _mm512_load_ps(lanes[q + 8][j] + 16 * d));
        for (int q = 0; q < 4; ++q) t[q] = _mm512_add_ps(t[q], t[q + 4]);
        const __m512 res = _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3]));
        if (kFull) _mm512_storeu_ps(out[j] + i0 + 16 * d, res);
        else _mm512_mask_storeu_ps(out[j] + i0 + 16 * d, mk[d], res);
      }
  }
}

void attend_v_lanes16(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                      int64_t lane_rows, int64_t dv, float* const* out) {
  using Tile =
      void (*)(const float*, int64_t, const int64_t*, const float*, int64_t, int64_t, int64_t, float* const*, float*);
  const bool full = dv % 64 == 0;
  const Tile tiles[5] = {nullptr, full ? attend_v_tile<1, true> : attend_v_tile<1, false>,
                         full ? attend_v_tile<2, true> : attend_v_tile<2, false>,
                         full ? attend_v_tile<3, true> : attend_v_tile<3, false>,
                         full ? attend_v_tile<4, true> : attend_v_tile<4, false>};
  for (int64_t j = 0; j < m; j += 4)
    tiles[m - j < 4 ? m - j : 4](p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, out + j, nullptr);
}

void attend_v_lanes16_keep(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                           int64_t lane_rows, int64_t dv, float* acc) {
  using Tile =
      void (*)(const float*, int64_t, const int64_t*, const float*, int64_t, int64_t, int64_t, float* const*, float*);
  const bool full = dv % 64 == 0;
  const Tile tiles[5] = {nullptr, full ? attend_v_tile<1, true, true> : attend_v_tile<1, false, true>,
                         full ? attend_v_tile<2, true, true> : attend_v_tile<2, false, true>,
                         full ? attend_v_tile<3, true, true> : attend_v_tile<3, false, true>,
                         full ? attend_v_tile<4, true, true> : attend_v_tile<4, false, true>};
  for (int64_t j = 0; j < m; j += 4)
    tiles[m - j < 4 ? m - j : 4](p + j * ldp, ldp, n_vis + j, v, ldv, lane_rows, dv, nullptr, acc + j * 16 * dv);
}

// s *= scale, and std::max's fold from -inf (NaN skipped: vmaxps returns
// its second operand for a NaN). Lane-wise maxima give the same number; only
// +0 and -0 could come out in another order, so a zero maximum is folded
// again in order.
float scale_max(float* s, int64_t n, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), sc);
    _mm512_mask_storeu_ps(s + i, m, x);
    mx = _mm512_mask_max_ps(mx, m, x, mx);
  }
  float r = _mm512_reduce_max_ps(mx);
  if (r == 0.0f) {
    r = -INFINITY;
    for (int64_t i = 0; i < n; ++i) r = r < s[i] ? s[i] : r;
  }
  return r;
}

void scale_round_f16(float* s, int64_t n, float inv) {
  const __m512 iv = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), iv);
    _mm512_mask_storeu_ps(s + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
}

// The lanes' stage of a 16 x 16 transpose: for rows i with (i & d) == 0, row i takes the elements of rows i and
// i + d whose index has bit d clear (row i + d's shifted up), row i + d those with it set; d = 8, 4, 2, 1.
template <int D>
void transpose_stage(__m512* r) {
  alignas(64) int32_t lo[16], hi[16];
  for (int e = 0; e < 16; ++e) {
    lo[e] = (e & D) ? 16 + e - D : e;
    hi[e] = (e & D) ? 16 + e : e + D;
  }
  const __m512i il = _mm512_load_si512(lo), ih = _mm512_load_si512(hi);
  for (int i = 0; i < 16; ++i)
    if ((i & D) == 0) {
      const __m512 a = r[i], b = r[i + D];
      r[i] = _mm512_permutex2var_ps(a, il, b);
      r[i + D] = _mm512_permutex2var_ps(a, ih, b);
    }
}

void transpose16x16(__m512* r) {
  transpose_stage<8>(r);
  transpose_stage<4>(r);
  transpose_stage<2>(r);
  transpose_stage<1>(r);
}

// 16 queries x 16 cells at a time: each query's scores scaled and rounded as scale_round_f16, the 16 x 16
// block transposed, cell c's 16 values stored into its lane's row.
void round_p_lanes(const float* s, int64_t lds, const int64_t* n, const float* inv, int64_t m, int64_t nc,
                   int64_t lane_rows, float* pt, int64_t ldt) {
  for (int64_t j0 = 0; j0 < m; j0 += 16) {
    const int64_t nq = m - j0 < 16 ? m - j0 : 16;
    for (int64_t c0 = 0; c0 < nc; c0 += 16) {
      __m512 r[16];
      for (int jj = 0; jj < 16; ++jj) {
        const int64_t left = jj < nq ? n[j0 + jj] - c0 : 0;
        if (left <= 0) {
          r[jj] = _mm512_setzero_ps();
          continue;
        }
        const __mmask16 mk = tail_mask(left);
        const __m512 x =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s + (j0 + jj) * lds + c0), _mm512_set1_ps(inv[j0 + jj]));
        r[jj] =
            _mm512_maskz_mov_ps(mk, _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      }
      transpose16x16(r);
      const int64_t ncc = nc - c0 < 16 ? nc - c0 : 16;
      for (int64_t c = 0; c < ncc; ++c) _mm512_storeu_ps(pt + (c * lane_rows + c0 / 16) * ldt + j0, r[c]);
    }
  }
}

// MQ queries x 64 columns of one lane: the accumulators (acc + j * 16 * dv + 16 d) in registers over the
// lane's rows (v and pt step one row per cell r = l, l + 16, ...), masked as attend_v_tile's for the cells
// that only some queries see.
template <int MQ, bool kFull>
void attend_v_cells_tile(const float* pt, int64_t ldt, const int64_t* nv, int64_t l, const float* v, int64_t ldv,
                         const __mmask16* mk, int64_t dv, float* acc) {
  int64_t lo = nv[0], hi = nv[0];
  for (int j = 1; j < MQ; ++j) {
    lo = nv[j] < lo ? nv[j] : lo;
    hi = nv[j] > hi ? nv[j] : hi;
  }
  if (hi <= l) return;  // no cell of this lane: the accumulators stay as they are
  __m512 a[MQ][4];
  for (int j = 0; j < MQ; ++j)
    for (int d = 0; d < 4; ++d) {
      const float* src = acc + j * 16 * dv + 16 * d;
      a[j][d] = kFull ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(mk[d], src);
    }
  int64_t r = l;
  const float* vr = v;
  const float* pr = pt;
  for (; r < lo; r += 16, vr += ldv, pr += ldt) {
    __m512 x[4];
    for (int d = 0; d < 4; ++d) {
      x[d] = kFull ? _mm512_loadu_ps(vr + 16 * d) : _mm512_maskz_loadu_ps(mk[d], vr + 16 * d);
      asm("" : "+v"(x[d]));  // one load per vector: GCC 12 folded it into each of the MQ FMAs (load-bound)
    }
    for (int j = 0; j < MQ; ++j) {
      const __m512 pj = _mm512_set1_ps(pr[j]);
      for (int d = 0; d < 4; ++d) a[j][d] = _mm512_fmadd_ps(x[d], pj, a[j][d]);
    }
  }
  for (; r < hi; r += 16, vr += ldv, pr += ldt) {
    __m512 x[4];
    for (int d = 0; d < 4; ++d) x[d] = kFull ? _mm512_loadu_ps(vr + 16 * d) : _mm512_maskz_loadu_ps(mk[d], vr + 16 * d);
    for (int j = 0; j < MQ; ++j) {
      const __mmask16 live = r < nv[j] ? __mmask16(0xFFFF) : __mmask16(0);
      const __m512 pj = _mm512_set1_ps(pr[j]);
      for (int d = 0; d < 4; ++d) a[j][d] = _mm512_mask3_fmadd_ps(x[d], pj, a[j][d], live);
    }
  }
  for (int j = 0; j < MQ; ++j)
    for (int d = 0; d < 4; ++d) {
      float* dst = acc + j * 16 * dv + 16 * d;
      if (kFull) _mm512_storeu_ps(dst, a[j][d]);
      else _mm512_mask_storeu_ps(dst, mk[d], a[j][d]);
    }
}

// Lane by lane, 64 columns at a time: the lane's V rows (lane_rows x 256 bytes) and p rows stay in L1 while
// the tiles of kCellsTile queries pass over them.
constexpr int kCellsTile = 4;
void attend_v_lanes16_cells(const float* pt, int64_t ldt, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                            int64_t lane_rows, int64_t dv, float* acc) {
  using Tile = void (*)(const float*, int64_t, const int64_t*, int64_t, const float*, int64_t, const __mmask16*,
                        int64_t, float*);
  const Tile full[kCellsTile + 1] = {nullptr, attend_v_cells_tile<1, true>, attend_v_cells_tile<2, true>,
                                     attend_v_cells_tile<3, true>, attend_v_cells_tile<4, true>};
  const Tile part[kCellsTile + 1] = {nullptr, attend_v_cells_tile<1, false>, attend_v_cells_tile<2, false>,
                                     attend_v_cells_tile<3, false>, attend_v_cells_tile<4, false>};
  for (int64_t l = 0; l < 16; ++l)
    for (int64_t i0 = 0; i0 < dv; i0 += 64) {
      const int64_t len = dv - i0 < 64 ? dv - i0 : 64;
      __mmask16 mk[4];
      for (int d = 0; d < 4; ++d) mk[d] = 16 * d < len ? tail_mask(len - 16 * d) : __mmask16(0);
      const Tile* tiles = len == 64 ? full : part;
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

constexpr AttnKernels kAttnKernels = {"avx512",
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
                                      kHeadsSmallMinCells,
                                      0,
                                      nullptr,
                                      nullptr,
                                      accumulate_reduce_f16,
                                      0,
                                      nullptr,
                                      0,
                                      false};

constexpr AttnKernels kAttnKernelsPrefetch = [] {
  AttnKernels k = kAttnKernels;
  k.dots_f16_groups = dots_f16_groups;
  k.groups_min_cells = kPrefetchMinCells;
  k.heads_small_min_cells = kPrefetchMinCells;
  k.accumulate_f16_groups = accumulate_f16_groups;
  k.groups_staged = true;
  return k;
}();

}  // namespace opal::cpu::avx512
#endif  // x86
