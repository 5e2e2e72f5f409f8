// ATTENTION by tiles with an online softmax (flash-style; the node's
// iparams[2] = 1, the context's -fa on, or auto with a quantized cache).
//
// The visibility rules are those of ops/attention.cpp: a token sees the cells
// of its sequence with pos <= its pos (and pos_token - pos_cell < W under a
// sliding window W), taken in position order. Work units are (kv head g,
// block of up to flash_rows() / group consecutive tokens of one sequence, cell
// range): the block's query rows (the GQA group of each token, j = token *
// group + head) meet the visible cells a tile at a time (kFlashTile cells for
// a decode, kFlashPromptTile for a prompt):
//   K tile widened to f32 [n][dk] once for all rows (f16, bf16, f32, q8_0,
//   q4_0 rows: kernels/attn_flash.h), scores s = scale * q . k for the tile
//   only, each row's running max m and sum l updated
//   (m' = max(m, max s), l' = l * e^(m - m') + sum e^(s - m')), its
//   accumulator rescaled by e^(m - m') (one online_softmax call for the
//   tile's rows) and the V tile (widened once) added with the weights
//   e^(s - m');
// the output is acc / l. Up to kFlashDirectRows rows (a decode's GQA group)
// over an f16, q8_0 or q4_0 cache read K and V in place instead (dots_f16 / accum_f16: each
// row converted in registers once for the rows; no tile widened to memory).
// No row of scores longer than a tile is ever held,
// so memory does not grow with the depth beyond the cell lists.
// Decode (up to kSplitMaxTokens tokens) splits each unit's cells into ranges of
// about kSplitCells, as many at one thread as at sixteen: every range keeps its
// own (m, l, acc) in the work buffer and a second pass merges them in range order
// (acc = sum acc_c e^(m_c - M), l likewise), so the thread count never changes a
// result.
// q stays f32 (not rounded to the cache type) and sums run in the kernels'
// orders: results agree with the materialized path within float rounding,
// not bit for bit (the default f16 path keeps llama.cpp's bits). Except over
// a q8_0 / q4_0 K in place (decode's few rows): there q is rounded to q8_0
// once per row and each cell's K·q summed in integers, as llama.cpp's flash
// attention does (its vec_dot order and bits, kernels/attn_flash.h
// dots_q8_0_int; the prompt's widened tiles keep f32 q).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

constexpr int64_t kFlashRows = 64;      // query rows per unit (whole GQA groups), at least
constexpr int64_t kFlashRowsMax = 256;  // and at most: a prompt takes the most that keep the threads busy
constexpr int64_t kUnitsPerThread = 8;  // the fewest (kv head, block) units per thread a larger block may leave
constexpr int64_t kSplitMaxTokens = 8;  // batches up to this size split each unit's cells into ranges
constexpr int64_t kSplitCells = 512;    // cells per range of a split (a multiple of kFlashTile)
constexpr int64_t kSplitMax = 32;       // most ranges per unit (16384 cells)
// Cells per tile of a prompt (more than kSplitMaxTokens tokens): two kFlashTile halves for `dots` (each transposed
// on its own), one online-softmax step and one `accum` for the whole tile, so each row's per-tile costs (the
// maximum, the rescale, the calls, the accumulators' loads and stores) are shared by twice the cells. A decode
// keeps kFlashTile (its in-place forms, splits and prefetches are sized for it).
constexpr int64_t kFlashPromptTile = 2 * kFlashTile;
constexpr int64_t kAccumChunkRows = 48;  // a prompt tile's `accum` rows per call (between prefetches; 8 x 6-row tiles)

// Query rows per unit. Every unit widens the K and V rows of all its visible
// cells, so a prompt at depth widens the cache once per block: larger blocks
// share one widening among more rows (256 rows: a quarter of the widening of
// 64). Only the cells of a partly visible tile are computed and dropped (the
// rows that see a tile are a suffix of the block's), whatever the block size,
// and no row's arithmetic depends on it. Larger blocks are taken only while
// they leave kUnitsPerThread units per thread (the split by cost stays even).
int64_t flash_rows(const Tensor& node, int n_threads) {
  const Tensor& q = *node.src[kAttnQ];
  const int64_t hkv = node.iparams[0], T = q.ne[2];
  const int64_t group = std::max<int64_t>(1, q.ne[1] / hkv);
  for (int64_t rows = kFlashRowsMax; rows > kFlashRows; rows /= 2) {
    const int64_t bt = std::max<int64_t>(1, rows / group);
    if (hkv * ((T + bt - 1) / bt) >= kUnitsPerThread * int64_t(std::max(1, n_threads))) return rows;
  }
  return kFlashRows;
}
int64_t flash_block_tokens(int64_t rows, int64_t group) { return std::max<int64_t>(1, rows / group); }

uint64_t a64(uint64_t x) { return (x + 63) / 64 * 64; }

struct FlashLayout {
  uint64_t off_bstart = 0, off_partial = 0, shared = 0;
  uint64_t off_k = 0, off_v = 0, off_s = 0, off_q = 0, off_acc = 0, off_m = 0, off_l = 0, off_lo = 0, off_hi = 0;
  uint64_t off_q8 = 0;  // q rounded to q8_0 (flash_q8_row) for a q8_0 / q4_0 K's integer dots: q8_row bytes a row
  uint64_t q8_row = 0;
  uint64_t per_thread = 0;
  int64_t rows = 0;
};

FlashLayout flash_layout(const Tensor& node, int n_threads) {
  const Tensor& q = *node.src[kAttnQ];
  const int64_t hkv = node.iparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = node.src[kAttnV]->ne[0] / hkv;
  const int64_t n_cells = node.src[kAttnK]->ne[1];
  const int64_t group = std::max<int64_t>(1, hq / hkv);
  FlashLayout l;
  l.rows = flash_block_tokens(flash_rows(node, n_threads), group) * group;
  // A decode unit holds the rows of several kv heads (up to all of them): its query rows, scores and accumulators
  // take hkv times a block's rows.
  const int64_t unit_rows = T <= kSplitMaxTokens ? std::max(l.rows, hq * std::min(T, l.rows / group)) : l.rows;
  l.off_bstart = a64(uint64_t(n_cells) * 4);
  l.off_partial = l.off_bstart + a64(uint64_t(T + 1) * 4);
  const uint64_t partial = T <= kSplitMaxTokens ? uint64_t(T * hq * kSplitMax * (dv + 2)) * 4 : 0;
  l.shared = l.off_partial + a64(partial);
  l.off_k = a64(uint64_t(n_cells) * 4);  // after the visible cells
  l.off_v = l.off_k + a64(uint64_t(kFlashPromptTile * dk) * 4);
  l.off_s = l.off_v + a64(uint64_t(kFlashPromptTile * dv) * 4);
  l.off_q = l.off_s + a64(uint64_t(unit_rows * kFlashPromptTile) * 4);
  l.off_acc = l.off_q + a64(uint64_t(unit_rows * dk) * 4);
  l.off_m = l.off_acc + a64(uint64_t(unit_rows * dv) * 4);
  l.off_l = l.off_m + a64(uint64_t(unit_rows) * 4);
  l.off_lo = l.off_l + a64(uint64_t(unit_rows) * 4);
  l.off_hi = l.off_lo + a64(uint64_t(l.rows) * 8);
  l.off_q8 = l.off_hi + a64(uint64_t(l.rows) * 8);
  const DType kt = node.src[kAttnK]->type;
  l.q8_row = (kt == DType::Q8_0 || kt == DType::Q4_0) && dk % 32 == 0 ? uint64_t(flash_q8_row_bytes(dk)) : 0;
  l.per_thread = l.off_q8 + l.q8_row * uint64_t(unit_rows);
  return l;
}

// Widens the rows of cells[0..n) of one head (d values from base) to f32.
void widen(const FlashKernels& fk, DType type, const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n,
           int64_t d, float* dst, int64_t ld) {
  switch (type) {
    case DType::F16: return fk.widen_f16(base, stride, cells, n, d, dst, ld);
    case DType::Q8_0: return fk.widen_q8_0(base, stride, cells, n, d, dst, ld);
    case DType::Q4_0: return fk.widen_q4_0(base, stride, cells, n, d, dst, ld);
    default:
      for (int64_t r = 0; r < n; ++r) row_to_f32(type, base + uint64_t(cells[r]) * stride, dst + r * ld, d);
  }
}

}  // namespace

uint64_t attention_flash_work_size(const Tensor& node, int n_threads) {
  const FlashLayout l = flash_layout(node, n_threads);
  return l.shared + l.per_thread * uint64_t(std::max(1, n_threads));
}

void compute_attention_flash(const Tensor& node, const OpContext& ctx) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int32_t* tok = static_cast<const int32_t*>(node.src[kAttnTokens]->data);
  const int32_t* cell = static_cast<const int32_t*>(node.src[kAttnCells]->data);
  const int64_t hkv = node.iparams[0];
  const int32_t window = node.iparams[1];
  const float scale = node.fparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = v.ne[0] / hkv;
  const int64_t group = hq / hkv;
  const int nth_pool = ctx.pool.size();  // the chunks run() hands out (work_size's n_threads)
  const FlashLayout l = flash_layout(node, nth_pool);
  const int64_t bt = l.rows / group;  // tokens per block (flash_rows)
  const FlashKernels& fk = flash_kernels();
  // The in-place forms for a decode's few rows (kernels/attn_flash.h): an f16 cache of whole 16s, q8_0 or q4_0.
  auto dots_direct = k.type == DType::F16 && dk % 16 == 0 ? fk.dots_f16
                     : k.type == DType::Q8_0              ? fk.dots_q8_0
                     : k.type == DType::Q4_0              ? fk.dots_q4_0
                                                          : nullptr;
  auto accum_direct = v.type == DType::F16 && dv % 16 == 0 ? fk.accum_f16
                      : v.type == DType::Q8_0              ? fk.accum_q8_0
                      : v.type == DType::Q4_0              ? fk.accum_q4_0
                                                           : nullptr;
  const bool direct_k = dots_direct != nullptr, direct_v = accum_direct != nullptr;
  // A q8_0 / q4_0 K takes the integer K·q in place (llama.cpp's vec_dot order, kernels/attn_flash.h): q rounded
  // to q8_0 once per row of a unit (flash_q8_row), each cell's blocks summed in integers.
  auto dots_int = l.q8_row == 0 ? nullptr : k.type == DType::Q8_0 ? fk.dots_q8_0_int : fk.dots_q4_0_int;
  const uint64_t k_head_bytes = row_bytes(k.type, dk), v_head_bytes = row_bytes(v.type, dv);

  // The live cells in position order (cells past the last one in use are never visible).
  const int64_t n_live = live_cell_count(*node.src[kAttnCells], ctx);
  int32_t* order = reinterpret_cast<int32_t*>(ctx.work);
  int64_t n_order = 0;
  bool sorted = true;
  for (int64_t c = 0; c < n_live; ++c) {
    if (cell[2 * c + 1] < 0) continue;
    sorted = sorted && (n_order == 0 || cell[2 * order[n_order - 1]] <= cell[2 * c]);
    order[n_order++] = int32_t(c);
  }
  if (!sorted)
    std::stable_sort(order, order + n_order, [&](int32_t a, int32_t b) { return cell[2 * a] < cell[2 * b]; });
  // Blocks: up to bt consecutive tokens of one sequence.
  int32_t* bstart = reinterpret_cast<int32_t*>(ctx.work + l.off_bstart);
  int64_t nb = 0;
  for (int64_t t = 0; t < T; ++t)
    if (nb == 0 || t - bstart[nb - 1] >= bt || tok[2 * t + 1] != tok[2 * bstart[nb - 1] + 1]) bstart[nb++] = int32_t(t);
  bstart[nb] = int32_t(T);
  // Cell ranges per unit (decode): one per kSplitCells live cells (at most kSplitMax), whatever the thread count, so
  // that the threads share few units evenly (SmolLM2's 3 kv heads at depth 4096: 24 pieces, where whole units would
  // split 2 : 1 on 2 threads) and the result never depends on how many threads there are: each range's arithmetic
  // and the merge's order are fixed by the cells alone.
  const int64_t tile = T <= kSplitMaxTokens ? kFlashTile : kFlashPromptTile;  // cells per tile
  int64_t n_split = 1;
  if (T <= kSplitMaxTokens) n_split = std::clamp<int64_t>(n_order / kSplitCells, 1, kSplitMax);
  float* partial = reinterpret_cast<float*>(ctx.work + l.off_partial);
  const int64_t pstride = dv + 2;  // m, l, acc[dv]

  auto cost = [&](int64_t b) {
    double c = 0.0;
    for (int64_t t = bstart[b]; t < bstart[b + 1]; ++t)
      c += double(window > 0 ? std::min(std::max(tok[2 * t], 0) + 1, window) : std::max(tok[2 * t], 0) + 1) + 16.0;
    return c;
  };
  double per_head = 0.0;
  for (int64_t b = 0; b < nb; ++b) per_head += cost(b);
  const double total = per_head * double(hkv);

  // Kv heads per unit. A decode takes several kv heads' rows in one unit, tile by tile (each tile's cells for
  // every head of the unit before the next tile): the cache holds a cell's kv heads side by side, so a tile reads
  // whole rows of the cache (one head at a time read one 256-byte slice of every 2 KiB row for Qwen3; at one
  // thread, d4096, load 6-11, its decode ATTENTION minimum went 1419-1472 -> 1193-1296 us; SmolLM2's 128-byte
  // slices of 384-byte rows: level within the noise, docs/perf/stop16-long2.md). One thread takes all heads at once;
  // more threads, fewer per unit, so that there are 4 units a thread (a decode at a few hundred cells has one cell
  // range). No head's arithmetic depends on the heads beside it: neither the grouping nor the thread count changes a
  // bit. A prompt takes one kv head per unit (its tiles are widened once for 64-256 rows).
  // Where the in-place f16 forms give each load one stride over a tile (fk.strided_f16: AVX-512), the hardware
  // prefetcher follows one kv head's slices of the cells (two streams, K and V, of one stride each) better than
  // software prefetches of whole rows: a decode over an f16 cache takes one kv head per unit and prefetches
  // nothing (bench_attn_decode, one thread, d4096, CPU time per layer: Qwen3 1050-1180 -> 890-930 us, SmolLM2
  // 250-295 -> 227-269 us, under fa 0's 1400-1490 / 270-300; docs/PERF.md "Stop 18, dec"). A quantized cache and
  // AVX2 keep the grouping and the prefetch (AVX2 without them lost 10-40 %), and so do the shapes the strided
  // forms do not cover (dk other than 64 / 128; V rows of 128 columns for more than 2 rows take two passes).
  const bool strided_shape = (dk == 64 || dk == 128) && (dv == 64 || (dv == 128 && group <= 2));
  // (The integer K·q's unrolled loads give a quantized cache the same single strides, but one kv head per unit
  // without the prefetch lost 30-110 % from DRAM there: Qwen3 q8_0 d16384 3.4-3.6 -> 5.3-5.9 ms, q4_0 3.4-3.6 ->
  // 7.3-8.5 ms, bench_attn_decode, load 3.4, stop 19; so a quantized cache keeps them.)
  // That was Zen 4's hardware prefetcher. Where the weights' decode takes a software prefetch (decode_prefetch():
  // every host but AMD's AVX-512 cores) the cache's does too: on an Intel Xeon (AVX-512) the grouping and the
  // prefetch read SmolLM2-135M / Qwen3-0.6B / Llama-3.2-1B Q4_0 decode at d4096 (-fa 1) 1.24-1.34x faster at one
  // thread and 1.19-1.34x at two, token by token (stop 43, docs/perf/cpu-round2g.md).
  const bool hw_prefetch = fk.strided_f16 && !decode_prefetch() && k.type == DType::F16 && v.type == DType::F16 &&
                           direct_k && direct_v && strided_shape;
  int64_t heads_per_unit = 1;
  if (T <= kSplitMaxTokens && !hw_prefetch) {
    const int64_t want = nth_pool <= 1 ? 1 : std::clamp<int64_t>((4 * nth_pool + n_split - 1) / n_split, 1, hkv);
    heads_per_unit = (hkv + want - 1) / want;
  }

  ctx.pool.run([&](int ith, int nth) {
    uint8_t* w = ctx.work + l.shared + l.per_thread * uint64_t(ith);
    int32_t* vis = reinterpret_cast<int32_t*>(w);
    float* kt = reinterpret_cast<float*>(w + l.off_k);
    float* vt = reinterpret_cast<float*>(w + l.off_v);
    float* s = reinterpret_cast<float*>(w + l.off_s);
    float* qb = reinterpret_cast<float*>(w + l.off_q);
    float* acc = reinterpret_cast<float*>(w + l.off_acc);
    float* mrow = reinterpret_cast<float*>(w + l.off_m);
    float* lrow = reinterpret_cast<float*>(w + l.off_l);
    int64_t* lo = reinterpret_cast<int64_t*>(w + l.off_lo);
    int64_t* hi = reinterpret_cast<int64_t*>(w + l.off_hi);
    uint8_t* q8 = w + l.off_q8;
    double before = 0.0;
    // The visible list depends on the block's sequence and last position only: the kv heads and cell ranges
    // of one block (every unit of a decode) reuse it instead of scanning all the cells again.
    int32_t vis_seq = -1, vis_pmax = 0;
    int64_t vis_n = 0;
    for (int64_t g0 = 0; g0 < hkv; g0 += heads_per_unit)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t split = 0; split < n_split; ++split) {
          const int64_t ng = std::min(heads_per_unit, hkv - g0);  // kv heads g0 .. g0 + ng of this unit
          const double c = cost(b) / double(n_split) * double(ng);
          const int owner = std::min(nth - 1, int((before + 0.5 * c) * double(nth) / total));
          before += c;
          if (owner != ith) continue;
          const int64_t t0 = bstart[b], nt = bstart[b + 1] - t0, m = nt * group;  // m rows per kv head
          const int32_t seq = tok[2 * t0 + 1];
          // A decode unit's rows all take the integer K·q: q rounded once for the unit. A prompt's rows round only
          // for the rare tile that few of them see (its other tiles are widened and keep f32 q).
          const bool q8_all = dots_int && m <= kFlashDirectRows;
          int32_t pmax = tok[2 * t0];
          for (int64_t t = t0; t < t0 + nt; ++t) pmax = std::max(pmax, tok[2 * t]);
          if (seq < 0 || seq != vis_seq || pmax != vis_pmax) {
            vis_n = 0;
            for (int64_t o = 0; o < n_order; ++o) {
              const int64_t cc = order[o];
              if (cell[2 * cc + 1] == seq && cell[2 * cc] <= pmax) vis[vis_n++] = int32_t(cc);
            }
            vis_seq = seq, vis_pmax = pmax;
          }
          const int64_t n_max = vis_n;
          // Row j of kv head g0 + gi is row gi * m + j of qb, s, acc, mrow and lrow; lo and hi are per j.
          for (int64_t tt = 0; tt < nt; ++tt) {
            const int32_t pos = tok[2 * (t0 + tt)];
            // vis is in position order: the visible cells of a token are one range of it
            const int64_t h_end =
                std::upper_bound(vis, vis + n_max, pos, [&](int32_t p, int32_t cc) { return p < cell[2 * cc]; }) - vis;
            int64_t l_begin = 0;
            if (window > 0)
              l_begin = std::lower_bound(vis, vis + h_end, pos,
                                         [&](int32_t cc, int32_t p) { return p - cell[2 * cc] >= window; }) -
                        vis;
            for (int64_t hh = 0; hh < group; ++hh) {
              const int64_t j = tt * group + hh;
              lo[j] = l_begin;
              hi[j] = h_end;
              for (int64_t gi = 0; gi < ng; ++gi) {
                const int64_t jj = gi * m + j;
                const float* qsrc = reinterpret_cast<const float*>(row_ptr(q, (g0 + gi) * group + hh, t0 + tt, 0));
                std::copy(qsrc, qsrc + dk, qb + jj * dk);
                if (q8_all) flash_q8_row(k.type, qsrc, dk, q8 + uint64_t(jj) * l.q8_row);
                mrow[jj] = -INFINITY;
                lrow[jj] = 0.0f;
                std::fill(acc + jj * dv, acc + (jj + 1) * dv, 0.0f);
              }
            }
          }
          // Range bounds on whole tiles (the last range takes the rest).
          auto bound = [&](int64_t sp) {
            return sp == n_split ? n_max : n_max * sp / n_split / kFlashTile * kFlashTile;
          };
          const int64_t c0 = bound(split), c1 = bound(split + 1);
          const uint8_t* kunit = static_cast<const uint8_t*>(k.data) + row_bytes(k.type, g0 * dk);
          const uint8_t* vunit = static_cast<const uint8_t*>(v.data) + row_bytes(v.type, g0 * dv);
          const uint64_t k_unit_bytes = k_head_bytes * uint64_t(ng), v_unit_bytes = v_head_bytes * uint64_t(ng);
          for (int64_t r0 = c0; r0 < c1; r0 += tile) {
            const int64_t n = std::min(tile, c1 - r0);
            int64_t j0 = m, j1 = 0;  // the rows that see some cell of the tile
            for (int64_t j = 0; j < m; ++j)
              if (lo[j] < r0 + n && hi[j] > r0) j0 = std::min(j0, j), j1 = j + 1;
            if (j0 >= j1) continue;
            // Decode's few rows over an f16, q8_0 or q4_0 cache read K (and V below) in place: no widened tile. The
            // next tile's K and V rows of the unit's heads are prefetched (unless hw_prefetch: the kernels' strides
            // let the hardware prefetcher follow), across the end of a range too (the next range is usually this
            // thread's next unit), with prefetcht0 also when the unit has several heads (prefetcht1 there, for a
            // tile of all of Qwen3's heads, 256 KiB of K and V, ran the -fa 1 decode at d4096 1.05-1.18x slower token
            // by token on an Intel Xeon, avx512 and avx2, one thread; two threads 1.01-1.11x; stop 44).
            const bool direct = j1 - j0 <= kFlashDirectRows;
            // A prompt's widened tiles: the next tile's K and V slices of the unit's heads go to L2 while this one's
            // FMAs run, a few rows before each chunk of `accum` rows (widen_f16 gathering one head's 256 bytes of
            // each 2 KiB row waited on memory: 11 % of a Qwen3 pp512 @ d4096 layer, bench_attn_blocks
            // flash-prompt; the whole tile's prefetches in one burst before the tile stalled as long, stop 25).
            const int64_t pf_begin = r0 + n, pf_end = direct ? pf_begin : std::min(n_max, r0 + n + tile);
            int64_t pf_next = pf_begin;
            auto prefetch_until = [&](int64_t until) {
              for (; pf_next < until; ++pf_next) {
                const uint8_t* kr = kunit + uint64_t(vis[pf_next]) * k.nb[1];
                const uint8_t* vr = vunit + uint64_t(vis[pf_next]) * v.nb[1];
                for (uint64_t o = 0; o < k_unit_bytes; o += 64) __builtin_prefetch(kr + o, 0, 2);
                for (uint64_t o = 0; o < v_unit_bytes; o += 64) __builtin_prefetch(vr + o, 0, 2);
              }
            };
            if (direct && direct_k && direct_v && !hw_prefetch) {
              const int64_t r_end = std::min(n_max, r0 + n + tile);
              for (int64_t r = r0 + n; r < r_end; ++r) {
                const uint8_t* kr = kunit + uint64_t(vis[r]) * k.nb[1];
                const uint8_t* vr = vunit + uint64_t(vis[r]) * v.nb[1];
                for (uint64_t o = 0; o < k_unit_bytes; o += 64) __builtin_prefetch(kr + o);
                for (uint64_t o = 0; o < v_unit_bytes; o += 64) __builtin_prefetch(vr + o);
              }
            }
            for (int64_t gi = 0; gi < ng; ++gi) {
              const uint8_t* kbase = kunit + k_head_bytes * uint64_t(gi);
              const uint8_t* vbase = vunit + v_head_bytes * uint64_t(gi);
              const int64_t o = gi * m;  // this head's first row
              float* const sg = s + o * tile;
              float* const ag = acc + o * dv;
              if (direct && dots_int) {
                if (!q8_all)
                  for (int64_t j = j0; j < j1; ++j)
                    flash_q8_row(k.type, qb + (o + j) * dk, dk, q8 + uint64_t(o + j) * l.q8_row);
                dots_int(q8 + uint64_t(o + j0) * l.q8_row, int64_t(l.q8_row), j1 - j0, kbase, k.nb[1], vis + r0, n, dk,
                         scale, sg + j0 * tile, tile);
              } else if (direct && direct_k) {
                dots_direct(qb + (o + j0) * dk, dk, j1 - j0, kbase, k.nb[1], vis + r0, n, dk, scale, sg + j0 * tile,
                            tile);
              } else {
                widen(fk, k.type, kbase, k.nb[1], vis + r0, n, dk, kt, dk);
                // `dots` takes up to kFlashTile cells: the tile's halves in turn, each from the first row that sees
                // some cell of it (the rows before see none: online_softmax masks their stale scores there)
                for (int64_t h = 0; h < n; h += kFlashTile) {
                  const int64_t nh = std::min(kFlashTile, n - h);
                  int64_t jh = j0;
                  while (jh < j1 && !(lo[jh] < r0 + h + nh && hi[jh] > r0 + h)) ++jh;
                  if (jh < j1)
                    fk.dots(qb + (o + jh) * dk, dk, j1 - jh, kt + h * dk, dk, nh, dk, scale, sg + jh * tile + h, tile);
                }
              }
              fk.online_softmax(sg + j0 * tile, tile, j1 - j0, n, lo + j0, hi + j0, r0, mrow + o + j0, lrow + o + j0,
                                ag + j0 * dv, dv, dv);
              if (direct && direct_v) {
                accum_direct(sg + j0 * tile, tile, j1 - j0, vbase, v.nb[1], vis + r0, n, dv, ag + j0 * dv, dv);
              } else {
                widen(fk, v.type, vbase, v.nb[1], vis + r0, n, dv, vt, dv);
                // rows in chunks (each row's sums are its own: the same bits), the next tile's prefetches spread
                // over them
                const int64_t chunks = (j1 - j0 + kAccumChunkRows - 1) / kAccumChunkRows;
                for (int64_t c = 0; c < chunks; ++c) {
                  prefetch_until(pf_begin + (pf_end - pf_begin) * (gi * chunks + c + 1) / (ng * chunks));
                  const int64_t ja = j0 + c * kAccumChunkRows, jb = std::min(j1, ja + kAccumChunkRows);
                  fk.accum(sg + ja * tile, tile, jb - ja, vt, dv, n, dv, ag + ja * dv, dv);
                }
              }
            }
          }
          for (int64_t gi = 0; gi < ng; ++gi)
            for (int64_t j = 0; j < m; ++j) {
              const int64_t jj = gi * m + j;
              const int64_t t = t0 + j / group, h = (g0 + gi) * group + j % group;
              if (n_split > 1) {
                float* pp = partial + ((t * hq + h) * n_split + split) * pstride;
                pp[0] = mrow[jj];
                pp[1] = lrow[jj];
                std::copy(acc + jj * dv, acc + (jj + 1) * dv, pp + 2);
                continue;
              }
              float* out = reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + h * dv;
              const float inv = lrow[jj] > 0.0f ? 1.0f / lrow[jj] : 0.0f;
              for (int64_t i = 0; i < dv; ++i) out[i] = acc[jj * dv + i] * inv;
            }
        }
  });
  if (n_split == 1) return;
  // Merge the ranges of each (token, head).
  ctx.pool.run([&](int ith, int nth) {
    int64_t p0, p1;
    split_range(T * hq, ith, nth, &p0, &p1);
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t t = pair / hq, h = pair % hq;
      const float* pp = partial + pair * n_split * pstride;
      float mx = -INFINITY;
      for (int64_t c = 0; c < n_split; ++c) mx = std::max(mx, pp[c * pstride]);
      float* out = reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + h * dv;
      std::fill(out, out + dv, 0.0f);
      if (mx == -INFINITY) continue;
      float sum = 0.0f;
      for (int64_t c = 0; c < n_split; ++c) {
        const float* pc = pp + c * pstride;
        if (pc[0] == -INFINITY) continue;
        const float f = std::exp(pc[0] - mx);
        sum += pc[1] * f;
        for (int64_t i = 0; i < dv; ++i) out[i] += pc[2 + i] * f;
      }
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      for (int64_t i = 0; i < dv; ++i) out[i] *= inv;
    }
  });
}

}  // namespace opal::cpu
