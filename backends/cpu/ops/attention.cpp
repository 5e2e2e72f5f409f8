// KV_STORE and ATTENTION on the CPU.
//
// KV_STORE converts token t's row to the cache type (f16 rounds to nearest
// even; q8_0 / q4_0 quantize each 32-block as llama.cpp's reference
// quantizers) into cell cells[t].
//
// A node with iparams[2] = 1 (flash attention) runs ops/attention_flash.cpp;
// what follows is the materialized path (-fa off, the default for f16).
//
// ATTENTION, per token t and query head h (kv head g = h / (Hq / Hkv)), in
// the arithmetic of llama.cpp's non-flash-attention graph (K*Q with
// ggml_mul_mat, ggml_soft_max_ext, V*P with ggml_mul_mat), so that the results
// match its CPU backend bit for bit (kernels/llama_order.h, docs/fidelity.md):
//   visible cells: same seq as the token, pos <= the token's pos (causal);
//   q is rounded to the cache type (ggml converts the other MUL_MAT operand
//   to the f16 cache type);
//   s_c = dot(k_c, q) * scale, the dot in tinyBLAS order (one 16-lane
//   accumulator) when the batch has >= 2 tokens, dk % 16 == 0 and the cache
//   is not f32, else in ggml_vec_dot order (4 x 16 lanes over steps of 64,
//   then the tail);
//   softmax: e_c = ggml_v_expf(s_c - max) over 16-cell chunks, the sum of each
//   chunk's 16 lanes (reduce_add16) accumulated in double, p_c = e_c * (1/sum)
//   rounded to the cache type;
//   out_h = sum_c p_c v_c, where cell c accumulates into lane c % 16 (tinyBLAS,
//   >= 2 tokens) or c % 64 (ggml_vec_dot, one token) of a per-lane FMA
//   accumulator over cells in order, and the lanes are then reduced as ggml does.
// Sliding window (iparams[1] = W > 0): a causal cell with pos_token -
// pos_cell >= W keeps its place in the list but its score is -inf, so its
// probability is an exact 0, as llama.cpp's mask makes it: chunks and lanes
// stay indexed as llama.cpp indexes them.
// llama.cpp indexes chunks and lanes by cell; here they are indexed by the
// rank of the cell among the visible ones in position order, which is the
// same for a sequence that fills the cache from cell 0 (every golden run) and
// keeps a result independent of where a sequence's cells lie (copied or
// moved sequences).
// llama.cpp pads its KV view (n_kv) to a multiple of 256 cells; masked cells
// contribute exact zeros there, so they are skipped here. Threads split the
// (token, head) pairs. With an f16 cache and a SIMD ISA selected
// (kernels/attn_kernels.h), the dots and the per-lane accumulation run in SIMD
// with identical results (a decode's staged heads of 128+ values take V per kv
// head, each V row widened once for its query heads: heads_output; smaller
// heads too where the ISA asks, heads_small_min_cells); a batch
// with tinyBLAS dots on an ISA with the block helpers (AVX-512, AVX2) runs by
// blocks of query rows (attention_blocks), the threads splitting (kv head,
// block) units by cost.
// A q8_0 / q4_0 K cache (-fa off, as llama.cpp allows; a quantized V needs the
// tiled path): q is rounded through q8_0 (llama.cpp's vec_dot type for both)
// and each K row is dequantized, then the dots run in the orders above on the
// dequantized values (decode with the SIMD helpers: 64 rows dequantized at
// once, then dots_f32_lanes16's tinyBLAS order); llama.cpp sums its integer
// blocks instead, so the results agree within float rounding, not bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "backends/cpu/kernels/attn_flash.h"
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {
namespace {

namespace lo = llama_order;

constexpr int64_t kLanesBatch = 16;   // tinyBLAS: one 16-lane accumulator
constexpr int64_t kLanesSingle = 64;  // ggml_vec_dot_f16: 4 accumulators x 16 lanes

struct AttnLayout {
  uint64_t per_thread = 0;
  uint64_t off_q = 0, off_row = 0, off_acc = 0, off_vis = 0, off_kchunk = 0;
  int64_t ld_scores = 0;
  int64_t staged_heads = 0;  // heads whose score rows, q rows and kLanesSingle lanes the thread's parts hold
};

constexpr int64_t kQuantChunk = 64;  // quantized K rows dequantized at once (per-pair path)
// Up to this many visible cells a decode pair's V goes through accumulate_reduce_f16 where the ISA has it (its 64
// lanes' chains in registers, no lane accumulators zeroed, stored and read back; the same bits). SmolLM2 Q4_0 at
// one thread, AVX-512, decode ATTENTION per layer (`opal bench -p 0 -n 32 -d D --perf-log`, two alternated passes):
// d0 6.5 / 7.3 -> 5.1 / 5.5 us, d128 32.1 / 25.9 -> 22.7 / 23.5; d256 36.6 / 38.0 -> 38.7 / 41.8 and d480 50.5 /
// 53.7 -> 75.8 / 75.1 us (each V row then read once per 16 columns, its address and p once per FMA).
constexpr int64_t kFusedVMaxCells = 128;
constexpr int64_t kMaxGroupStaged = 16;     // heads of one token whose scores the per-pair path holds at once
constexpr int64_t kMaxGroupsWalk = 32;      // at dk 64: heads of one token whose K dots take one walk (groups_ok)
constexpr int64_t kStageCells = 64;         // cells per step of stage_scores (a multiple of 16: dots_f16's groups)
constexpr int64_t kStageMinF16Cells = 512;  // live cells from which an f16 K stages (see stage_f16)

AttnLayout attn_layout(const Tensor& node) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const int64_t dk = q.ne[0], dv = attention_dv(node), n_cells = k.ne[1];
  auto a64 = [](uint64_t x) { return (x + 63) / 64 * 64; };
  const int64_t staged = std::clamp<int64_t>(q.ne[1], 1, dk == 64 ? kMaxGroupsWalk : kMaxGroupStaged);
  AttnLayout l;
  l.staged_heads = staged;
  l.ld_scores = (n_cells + kLanesBatch + 15) / 16 * 16;
  l.off_q = a64(uint64_t(staged * l.ld_scores) * 4);  // a score row and a q row per head staged (stage_scores)
  l.off_row = l.off_q + a64(uint64_t(staged * dk) * 4);
  l.off_acc = l.off_row + a64(uint64_t(std::max(dk, dv)) * 4);
  l.off_vis = l.off_acc + a64(uint64_t(staged * kLanesSingle * dv) * 4);  // the lanes of every staged head
  l.off_kchunk = l.off_vis + a64(uint64_t(n_cells) * 4);
  const bool quant_k = k.type == DType::Q8_0 || k.type == DType::Q4_0;
  l.per_thread = l.off_kchunk + (quant_k ? a64(uint64_t(kQuantChunk * dk) * 4) : 0);
  return l;
}

// The block path (a batch with tinyBLAS dots and the block helpers of
// kernels/attn_kernels.h): up to kBlockQueries query rows at once (kBlockQueriesSmall for heads of 64), the heads
// of one kv head for consecutive tokens of one sequence, whose visible cells
// are prefixes of one list (cells in position order, pos <= the token's). The
// K and V rows of those cells are widened to f32 once for all of them; every
// row keeps its own dots, softmax and lane accumulation, so the results are
// those of the per-(token, head) path.
// The cells are walked in chunks of kBlockCells so that the widened K (then
// V) rows of a chunk stay in L2 while every row of the block uses them: each
// score is one cell's dot alone, and V's 16 lane accumulators per row are kept
// across chunks (attend_v_lanes16_keep), each lane's FMA chain running over
// its cells in order, and reduced after the last chunk: the same bits as one
// pass over all cells (widening every visible K and V row of a kv head, 2.4 MB
// each at d4608, streamed them from L3 once per block). Each chunk's scores are
// scaled and folded into their row's maximum right after its dots (std::max's
// fold, chunk after chunk in the cells' order: the same value), and its p
// rounded to the cache type right before its V accumulation, while they are in
// L1/L2; only the exponentials walk whole rows (64 x 4.6k scores, 1.2 MB at d4096).
// With round_p_lanes and attend_v_lanes16_cells (AVX-512, AVX2), V is walked in longer chunks of kBlockVCells:
// its p rounded into a lane-major copy (pt), then lane by lane, so that one lane's V and p rows (64 x 256 bytes
// each at dv 128) stay in L1 while every query tile meets them and each tile's accumulators are loaded and stored
// once per lane and chunk (with 256-cell chunks and tiles outside the lanes, the 128 KB of a chunk's V came from
// L2 once per 4-query tile: 35-39 % of the FMA peak). Each lane's FMA chain is the same, in the same order.
// Heads of up to 64 values take blocks of kBlockQueriesSmall rows (stop 28): each widened K and V row (gathered
// from L3 or DRAM at depth) and each K strip transposed serves twice the rows (SmolLM2 in bench_attn_blocks:
// prompt d16384 3-4 % shorter on AVX2 and AVX-512). The price is the work buffer's score rows, 128 x (cells + 32)
// floats per thread, and 512 KiB each of lane accumulators and lane-major p; at dv 128 those would double again
// (the rows' accumulators alone 1 MiB, the L2), so heads of 128 values keep kBlockQueries.
constexpr int64_t kBlockQueries = 64;
constexpr int64_t kBlockQueriesSmall = 128;
constexpr int64_t kBlockCells = 256;    // a multiple of 16: a chunk's lanes are the cells' lanes
constexpr int64_t kBlockVCells = 1024;  // V's chunk with attend_v_lanes16_cells (a multiple of 16)

int64_t block_tokens(int64_t group, int64_t dv) {
  return std::max<int64_t>(1, (dv <= 64 ? kBlockQueriesSmall : kBlockQueries) / group);
}

struct BlockLayout {
  uint64_t per_thread = 0;
  uint64_t off_q = 0, off_kv = 0, off_vis = 0, off_vis_lane = 0, off_nv = 0, off_out = 0, off_nvc = 0, off_acc = 0;
  uint64_t off_row_max = 0, off_row_inv = 0, off_pt = 0;
  int64_t ld_scores = 0, rows = 0, ld_pt = 0;
};

BlockLayout block_layout(const Tensor& node) {
  const Tensor& q = *node.src[kAttnQ];
  const int64_t hkv = node.iparams[0];
  const int64_t dk = q.ne[0], dv = attention_dv(node), n_cells = node.src[kAttnK]->ne[1];
  const int64_t group = std::max<int64_t>(1, q.ne[1] / hkv);
  auto a64 = [](uint64_t x) { return (x + 63) / 64 * 64; };
  BlockLayout l;
  l.rows = block_tokens(group, dv) * group;
  l.ld_scores = (n_cells + kLanesBatch + 15) / 16 * 16;
  l.off_q = a64(uint64_t(l.rows * l.ld_scores) * 4);
  l.off_kv = l.off_q + a64(uint64_t(l.rows * dk) * 4);
  l.off_vis = l.off_kv + a64(uint64_t(std::max(kBlockCells * dk, kBlockVCells * dv)) * 4);
  l.off_vis_lane = l.off_vis + a64(uint64_t(n_cells) * 4);
  l.off_nv = l.off_vis_lane + a64(uint64_t(kBlockCells) * 4);
  l.off_out = l.off_nv + a64(uint64_t(l.rows) * 8);
  l.off_nvc = l.off_out + a64(uint64_t(l.rows) * 8);
  l.off_acc = l.off_nvc + a64(uint64_t(l.rows) * 8);
  l.off_row_max = l.off_acc + a64(uint64_t(l.rows * 16 * dv) * 4);
  l.off_row_inv = l.off_row_max + a64(uint64_t(l.rows) * 4);
  l.ld_pt = (l.rows + 15) / 16 * 16;
  l.off_pt = l.off_row_inv + a64(uint64_t(l.rows) * 4);
  l.per_thread = l.off_pt + a64(uint64_t(kBlockVCells * l.ld_pt) * 4);
  return l;
}

uint64_t per_thread_bytes(const Tensor& node) {
  return std::max(attn_layout(node).per_thread, block_layout(node).per_thread);
}

// Reduces the per-lane accumulators acc[lane * dv + i] into out[i]. Only
// lanes below `used` were written; the others hold exact zeros in llama.cpp,
// and adding a zero changes nothing, so they are read as 0 here.
void reduce_lanes(const float* acc, int64_t lanes, int64_t used, int64_t dv, float* out) {
  auto at = [&](int64_t lane, int64_t i) { return lane < used ? acc[lane * dv + i] : 0.0f; };
  float t[16];
  for (int64_t i = 0; i < dv; ++i) {
    if (lanes == kLanesBatch) {
      for (int l = 0; l < 16; ++l) t[l] = at(l, i);
    } else {  // ggml's GGML_F32x16_REDUCE: (a0 + a2) + (a1 + a3), lane-wise
      for (int l = 0; l < 16; ++l) t[l] = (at(l, i) + at(32 + l, i)) + (at(16 + l, i) + at(48 + l, i));
    }
    out[i] = lo::reduce_add16(t);
  }
}

// Shared part of the work buffer: the live cells ordered by position, then
// the first token of each block (block path).
uint64_t order_bytes(const Tensor& node) { return (uint64_t(node.src[kAttnK]->ne[1]) * 4 + 63) / 64 * 64; }
uint64_t shared_bytes(const Tensor& node) {
  return order_bytes(node) + (uint64_t(node.src[kAttnQ]->ne[2] + 1) * 4 + 63) / 64 * 64;
}

// Decode split (split_pairs): after the per-thread parts, each token's visible cells, each pair's score row
// and each (pair, cell range)'s maximum.
constexpr int64_t kSplitMaxTokens = 8;   // batches up to this size may split their pairs' cells and columns
constexpr int64_t kSplitMinCells = 256;  // fewest cells per range of a split

// The fewest live cells for which a decode splits its pairs: the split wakes the pool three times instead of
// once, which costs more than the imbalance it removes (9 pairs on 2 threads: 5 : 4, a tenth of the node) until
// the pairs are long (stop 28, at d2048 on a loaded 2-vCPU host: 82 -> 161-194 us with the K-only heads split).
// Since its units divide among the OS threads (both passes in the heads kernels) the split is ahead at two threads
// from 2048 cells with AVX2 (bench_attn_decode decode-t2/smollm2: 95-162 against 130-224 us at d2048, 182-319
// against 259-450 at d4096) and level with AVX-512 (its per-pair V is as fast below 8192 cells).
// OPAL_ATTN_SPLIT_MIN_CELLS overrides it (tests: 0 to take the split at any depth).
int64_t split_min_cells() {
  const char* env = std::getenv("OPAL_ATTN_SPLIT_MIN_CELLS");
  return env && *env ? std::atoll(env) : 2048;
}

// The most (heads x live cells) of a one-token decode that runs on the calling thread instead of the pool: its
// few microseconds of dots (SmolLM2's 9 heads at depth 64: about 7 us) are then the serial ops' time, in which the
// idle workers prefetch the next MUL_MAT's weights (graph/thread_pool.h) instead of splitting 9 pairs 5 : 4 on a
// core's two SMT threads. Stop 36, two threads, tg64 from depth 0: SmolLM2 Q8_0 +6-11 %, Q4_0 +12-20 % (three
// alternated passes each); Qwen3 and Llama-3.2-1B (16 and 32 heads: serial up to 144 and 72 cells) level; from
// depth 256 level. OPAL_ATTN_SERIAL_MAX_WORK overrides it (tests: 0 to take the pool at any size).
int64_t serial_max_work() {
  const char* env = std::getenv("OPAL_ATTN_SERIAL_MAX_WORK");
  return env && *env ? std::atoll(env) : 9 * 256;
}

struct SplitLayout {
  uint64_t off_vis = 0, off_nvis = 0, off_scores = 0, off_max = 0, off_acc = 0, bytes = 0;
  int64_t ld_scores = 0;
};

SplitLayout split_layout(const Tensor& node, int n_threads) {
  const Tensor& q = *node.src[kAttnQ];
  const int64_t hq = q.ne[1], T = q.ne[2], n_cells = node.src[kAttnK]->ne[1];
  auto a64 = [](uint64_t x) { return (x + 63) / 64 * 64; };
  SplitLayout l;
  if (T > kSplitMaxTokens || n_threads < 2) return l;
  l.ld_scores = (n_cells + kLanesBatch + 15) / 16 * 16;
  l.off_nvis = a64(uint64_t(T * n_cells) * 4);
  l.off_scores = l.off_nvis + a64(uint64_t(T) * 8);
  l.off_max = l.off_scores + a64(uint64_t(T * hq * l.ld_scores) * 4);
  l.off_acc = l.off_max + a64(uint64_t(T * hq * n_threads) * 4);
  // A one-token decode's heads' kLanesSingle lanes, shared by the threads that take a part of them each
  // (split_v_parts).
  l.bytes = l.off_acc + (T == 1 ? a64(uint64_t(hq * kLanesSingle * attention_dv(node)) * 4) : 0);
  return l;
}

uint64_t split_bytes(const Tensor& node, int n_threads) { return split_layout(node, n_threads).bytes; }

}  // namespace

uint64_t attention_work_size(const Tensor& node, int n_threads) {
  if (node.iparams[2]) return attention_flash_work_size(node, n_threads);
  return shared_bytes(node) + per_thread_bytes(node) * uint64_t(n_threads) + split_bytes(node, n_threads);
}

namespace {

// ATTENTION by blocks of query rows (see BlockLayout); `order` holds the
// live cells in position order.
void attention_blocks(const Tensor& node, const OpContext& ctx, const int32_t* order, int64_t n_order,
                      const AttnKernels& simd, DType q_round) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int32_t* tok = static_cast<const int32_t*>(node.src[kAttnTokens]->data);
  const int32_t* cell = static_cast<const int32_t*>(node.src[kAttnCells]->data);
  const int64_t hkv = node.iparams[0];
  const int32_t window = node.iparams[1];
  const float scale = node.fparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = attention_dv(node);
  const int64_t group = hq / hkv, bt = block_tokens(group, dv);
  const BlockLayout l = block_layout(node);
  const uint64_t per_thread = per_thread_bytes(node);
  // Blocks: up to bt consecutive tokens of one sequence.
  int32_t* bstart = reinterpret_cast<int32_t*>(ctx.work + order_bytes(node));
  int64_t nb = 0;
  for (int64_t t = 0; t < T; ++t)
    if (nb == 0 || t - bstart[nb - 1] >= bt || tok[2 * t + 1] != tok[2 * bstart[nb - 1] + 1]) bstart[nb++] = int32_t(t);
  bstart[nb] = int32_t(T);
  // The threads split the (kv head, block) units by estimated cost (the
  // causal rows grow with the position); the split never changes a result.
  auto cost = [&](int64_t b) {
    double c = 0.0;
    for (int64_t t = bstart[b]; t < bstart[b + 1]; ++t) c += double(std::max(tok[2 * t], 0) + 1) + 16.0;
    return c;
  };
  double per_head = 0.0;
  for (int64_t b = 0; b < nb; ++b) per_head += cost(b);
  const double total = per_head * double(hkv);

  const auto widen = simd.widen_f16_ahead ? simd.widen_f16_ahead : simd.widen_f16;
  const auto exp_sum = simd.exp_sum_block ? simd.exp_sum_block : simd.softmax_exp;
  ctx.pool.run([&](int ith, int nth) {
    uint8_t* w = ctx.work + shared_bytes(node) + per_thread * uint64_t(ith);
    float* scores = reinterpret_cast<float*>(w);
    float* qb = reinterpret_cast<float*>(w + l.off_q);
    float* kv = reinterpret_cast<float*>(w + l.off_kv);
    int32_t* vis = reinterpret_cast<int32_t*>(w + l.off_vis);
    int64_t* nv = reinterpret_cast<int64_t*>(w + l.off_nv);
    float** outs = reinterpret_cast<float**>(w + l.off_out);
    int32_t* vis_lane = reinterpret_cast<int32_t*>(w + l.off_vis_lane);
    int64_t* nvc = reinterpret_cast<int64_t*>(w + l.off_nvc);  // each row's visible cells within the chunk
    float* acc = reinterpret_cast<float*>(w + l.off_acc);      // each row's 16 lane accumulators
    float* row_max = reinterpret_cast<float*>(w + l.off_row_max);
    float* row_inv = reinterpret_cast<float*>(w + l.off_row_inv);  // each row's 1 / (sum of its exponentials)
    float* pt = reinterpret_cast<float*>(w + l.off_pt);            // a V chunk's p, lane-major (round_p_lanes)
    const int64_t lds = l.ld_scores;
    double before = 0.0;
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        const double c = cost(b);
        const int owner = std::min(nth - 1, int((before + 0.5 * c) * double(nth) / total));
        before += c;
        if (owner != ith) continue;
        const int64_t t0 = bstart[b], nt = bstart[b + 1] - t0, m = nt * group;
        const int32_t seq = tok[2 * t0 + 1];
        int32_t pmax = tok[2 * t0];
        for (int64_t t = t0; t < t0 + nt; ++t) pmax = std::max(pmax, tok[2 * t]);
        int64_t n_max = 0;
        for (int64_t o = 0; o < n_order; ++o) {
          const int64_t c = order[o];
          if (cell[2 * c + 1] == seq && cell[2 * c] <= pmax) vis[n_max++] = int32_t(c);
        }
        for (int64_t tt = 0; tt < nt; ++tt) {
          const int32_t pos = tok[2 * (t0 + tt)];
          // vis is in position order: the token's visible cells are a prefix
          const int64_t n_vis =
              std::upper_bound(vis, vis + n_max, pos, [&](int32_t p, int32_t c) { return p < cell[2 * c]; }) - vis;
          for (int64_t hh = 0; hh < group; ++hh) {
            const int64_t j = tt * group + hh;
            nv[j] = n_vis;
            const float* qsrc = reinterpret_cast<const float*>(row_ptr(q, g * group + hh, t0 + tt, 0));
            round_activations(q_round, qsrc, qb + j * dk, dk);
          }
        }
        const uint8_t* kbase = static_cast<const uint8_t*>(k.data) + row_bytes(k.type, g * dk);
        const uint8_t* vbase = static_cast<const uint8_t*>(v.data) + uint64_t(g * dv) * 2;
        auto chunk_rows = [&](int64_t c0, int64_t nc) {
          for (int64_t j = 0; j < m; ++j) nvc[j] = std::clamp<int64_t>(nv[j] - c0, 0, nc);
        };
        // The V rows of cells c0 .. c0 + nc in order, 16 at a time: cell c0 + 16 k + l to row k of lane l in kv.
        auto widen_v_lane_major = [&](int64_t c0, int64_t nc, int64_t lane_rows) {
          for (int64_t k0 = 0; k0 < lane_rows; ++k0)
            widen(vbase, v.nb[1], vis + c0 + 16 * k0, std::min<int64_t>(16, nc - 16 * k0), dv, kv + k0 * dv,
                  lane_rows * dv);
        };
        // K*Q chunk by chunk; while a chunk's scores are in L1/L2, each row's part is masked (window), scaled
        // and folded into the row's maximum (std::max's fold in the cells' order, chunk after chunk: the fold
        // over the whole row).
        for (int64_t j = 0; j < m; ++j) row_max[j] = -INFINITY;
        for (int64_t c0 = 0; c0 < n_max; c0 += kBlockCells) {
          const int64_t nc = std::min(kBlockCells, n_max - c0);
          if (k.type == DType::F16) widen(kbase, k.nb[1], vis + c0, nc, dk, kv, dk);
          else if (k.type == DType::Q8_0) flash_kernels().widen_q8_0(kbase, k.nb[1], vis + c0, nc, dk, kv, dk);
          else flash_kernels().widen_q4_0(kbase, k.nb[1], vis + c0, nc, dk, kv, dk);
          chunk_rows(c0, nc);
          simd.dots_f32_lanes16(kv, dk, nvc, qb, dk, m, dk, scores + c0, lds);
          for (int64_t j = 0; j < m; ++j) {
            if (nvc[j] == 0) continue;
            float* s = scores + j * lds;
            if (window > 0) {  // the masked cells are a prefix of the row (positions in order)
              const int32_t pos = tok[2 * (t0 + j / group)];
              for (int64_t r = c0; r < c0 + nvc[j] && pos - cell[2 * vis[r]] >= window; ++r) s[r] = -INFINITY;
            }
            const float cm = simd.scale_max(s + c0, nvc[j], scale);
            row_max[j] = row_max[j] < cm ? cm : row_max[j];
          }
        }
        for (int64_t j = 0; j < m; ++j) {
          float* s = scores + j * lds;
          const int64_t n_vis = nv[j];
          const float mx = row_max[j];
          if (mx == -INFINITY) {  // no visible cell (cannot happen): zeros, as the per-pair path
            nv[j] = 0;
            continue;
          }
          // ggml_vec_soft_max_f32: 16-cell chunks; masked cells give exact zeros.
          const int64_t n_chunked = (n_vis + 15) / 16 * 16;
          for (int64_t r = n_vis; r < n_chunked; ++r) s[r] = -INFINITY;
          row_inv[j] = float(1.0 / exp_sum(s, n_chunked, mx));
        }
        for (int64_t j = 0; j < m; ++j)
          outs[j] = reinterpret_cast<float*>(row_ptr(node, t0 + j / group, 0, 0)) + (g * group + j % group) * dv;
        // A block whose cells fit one V chunk (every prompt up to kBlockVCells cells deep): its lane-major V (at
        // most 256 KiB at dv 64, 512 at 128) stays in L2 while tiles of four rows run their 16 lanes in registers and
        // reduce them at once (attend_v_lanes16), with no lane accumulators zeroed, stored and reduced from memory (the
        // same FMAs in the same order: the same bits).
        if (n_max <= kBlockVCells && simd.attend_v_lanes16) {
          const int64_t lane_rows = (n_max + 15) / 16;
          widen_v_lane_major(0, n_max, lane_rows);
          for (int64_t j = 0; j < m; ++j)
            if (nv[j] > 0) simd.scale_round_f16(scores + j * lds, nv[j], row_inv[j]);
          simd.attend_v_lanes16(scores, lds, nv, m, kv, dv, lane_rows, dv, outs);
          continue;
        }
        // V rows chunk by chunk, lane by lane (cells l, l + 16, ...): each lane's rows are read in order; each
        // row's p of the chunk rounded to the cache type first (its exponentials in L1/L2)
        std::fill(acc, acc + m * 16 * dv, 0.0f);
        const bool by_lanes = simd.round_p_lanes && simd.attend_v_lanes16_cells;
        const int64_t v_cells = by_lanes ? kBlockVCells : kBlockCells;
        for (int64_t c0 = 0; c0 < n_max; c0 += v_cells) {
          const int64_t nc = std::min(v_cells, n_max - c0), lane_rows = (nc + 15) / 16;
          if (by_lanes) {
            widen_v_lane_major(c0, nc, lane_rows);
          } else {
            for (int64_t lane = 0; lane < 16 && lane < nc; ++lane) {
              int64_t n_lane = 0;
              for (int64_t r = lane; r < nc; r += 16) vis_lane[n_lane++] = vis[c0 + r];
              simd.widen_f16(vbase, v.nb[1], vis_lane, n_lane, dv, kv + lane * lane_rows * dv, dv);
            }
          }
          chunk_rows(c0, nc);
          if (by_lanes) {
            simd.round_p_lanes(scores + c0, lds, nvc, row_inv, m, nc, lane_rows, pt, l.ld_pt);
            simd.attend_v_lanes16_cells(pt, l.ld_pt, nvc, m, kv, dv, lane_rows, dv, acc);
            continue;
          }
          for (int64_t j = 0; j < m; ++j)
            if (nvc[j] > 0) simd.scale_round_f16(scores + j * lds + c0, nvc[j], row_inv[j]);
          simd.attend_v_lanes16_keep(scores + c0, lds, nvc, m, kv, dv, lane_rows, dv, acc);
        }
        for (int64_t j = 0; j < m; ++j) simd.reduce_lanes(acc + j * 16 * dv, 16, 16, dv, outs[j]);
      }
  });
}

// Parts per item (a pair, or a kv head of a token) of a split pass: the most up to `cap` (>= 1) for which
// items x parts divide evenly among the pool's OS threads (every unit is one chunk of run_chunks, claimed as the
// threads come free), else `cap`.
int64_t balanced_parts(int64_t items, int64_t cap, int n_threads) {
  for (int64_t p = cap; p >= 1; --p)
    if ((items * p) % n_threads == 0) return p;
  return cap;
}

// The fewest parts, from 1 up to `cap`, for which items x parts divide evenly among the OS threads and give each
// at least one unit (V's column parts: fewer parts read each V row's cache lines fewer times), else 0.
int64_t fewest_balanced_parts(int64_t items, int64_t cap, int n_threads) {
  for (int64_t p = 1; p <= cap; ++p)
    if ((items * p) % n_threads == 0 && items * p >= n_threads) return p;
  return 0;
}

// The parts of the lanes into which a split one-token decode's V pass cuts the token, one per OS thread, where the
// table has accumulate_f16_groups: each thread takes its lanes of every head, so it reads whole V rows (lanes / parts
// consecutive rows of every `lanes`), and the lanes' reductions follow in a pass of their own; 0 otherwise. Before
// (stop 46) each thread took a run of whole kv heads, its part of every V row; by lanes, V at d4096 on two threads
// on an Intel Xeon (stop 49): Qwen3-0.6B 1.10-1.32x, SmolLM2-135M (which had taken column parts) 1.11-1.59x,
// Llama-3.2-1B 0.93-0.99x.
int64_t split_v_parts(const AttnKernels& simd, int64_t tokens, int64_t dv, int64_t lanes, int n_threads) {
  return simd.accumulate_f16_groups && tokens == 1 && n_threads >= 2 && dv % 16 == 0 && lanes >= n_threads ? n_threads
                                                                                                           : 0;
}

// A decode's few (token, head) pairs over more threads than divide them (SmolLM2's 9 heads on 2 threads: 5 : 4)
// split inside each pair, in three passes, with the bits of the per-pair path (each step below is that path's,
// on a part whose arithmetic does not depend on the rest):
//   1. (pair, cell range) units: the dots and the scale of those cells (each cell's dot alone), the range's
//      maximum (the pair's maximum is the maximum of its ranges: the same value); with dots_f16_groups (token,
//      cell range) units for every head of the token;
//   2. pairs: the softmax over the whole row (its double sum of 16-cell chunks in order) and p in the cache type;
//   3. (pair, column range) units: V's lanes for those columns (each column's FMA chains alone) and their
//      reduction; for one token with accumulate_f16_groups, parts of the lanes instead, one per thread
//      (split_v_parts), each reading whole V rows, then
//   4. heads: the reduction of their lanes (pass 3 ran each lane's chains on one thread).
// Each pass runs its units as the chunks of one run_chunks job (scratch by the running thread's slot), so the
// units need only divide among the OS threads, not the pool's chunks: the heads of one kv head go together
// (dots_f16_heads, accumulate_f16_heads: each K and V row widened once for all of them, the same bits per head)
// where (token, kv head) x parts divide among the threads (SmolLM2 at two threads: 3 kv heads x 8 cell ranges
// for K, 3 x 2 column parts of 32 values, a cache line of each V row, for V).
// `f16` (dots_f16) is null for a quantized K (its rows widened kQuantChunk at a time, then dots_f32_lanes16).
void attention_split_pairs(const Tensor& node, const OpContext& ctx, const int32_t* order, int64_t n_order,
                           const AttnKernels& simd, const AttnKernels* f16, DType q_round, bool kq_lanes16,
                           int64_t lanes) {
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int32_t* tok = static_cast<const int32_t*>(node.src[kAttnTokens]->data);
  const int32_t* cell = static_cast<const int32_t*>(node.src[kAttnCells]->data);
  const int64_t hkv = node.iparams[0];
  const int32_t window = node.iparams[1];
  const float scale = node.fparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = attention_dv(node), n_cells = k.ne[1];
  const int64_t group = hq / hkv, pairs = T * hq, groups = T * hkv;
  const int nth_pool = ctx.pool.size(), n_threads = ctx.pool.n_threads();
  const AttnLayout l = attn_layout(node);
  const SplitLayout sl = split_layout(node, nth_pool);
  uint8_t* sw = ctx.work + shared_bytes(node) + per_thread_bytes(node) * uint64_t(nth_pool);
  int32_t* vis_all = reinterpret_cast<int32_t*>(sw);
  int64_t* nvis = reinterpret_cast<int64_t*>(sw + sl.off_nvis);
  float* scores_all = reinterpret_cast<float*>(sw + sl.off_scores);
  float* maxes = reinterpret_cast<float*>(sw + sl.off_max);
  for (int64_t t = 0; t < T; ++t) {  // each token's visible cells, in position order
    int32_t* vis = vis_all + t * n_cells;
    int64_t n = 0;
    for (int64_t o = 0; o < n_order; ++o) {
      const int64_t c = order[o];
      if (cell[2 * c + 1] == tok[2 * t + 1] && cell[2 * c] <= tok[2 * t]) vis[n++] = int32_t(c);
    }
    nvis[t] = n;
  }
  int64_t min_vis = n_cells;
  for (int64_t t = 0; t < T; ++t) min_vis = std::min(min_vis, nvis[t]);
  // Cell ranges per item: at most the pool's chunks (the maxima's room in SplitLayout), each of kSplitMinCells+.
  const int64_t range_cap = std::clamp<int64_t>(min_vis / kSplitMinCells, 1, nth_pool);
  const FlashKernels& widen_k = flash_kernels();
  const bool quant_k = f16 == nullptr;
  const bool heads_ok = !quant_k && f16->dots_f16_heads && group > 1 && group <= kMaxGroupStaged;
  const int64_t ranges_heads = balanced_parts(groups, range_cap, n_threads);
  const bool heads = heads_ok && (groups * ranges_heads) % n_threads == 0;
  // With dots_f16_groups a (token, range) unit takes the dots of every head of the token over whole K rows (one
  // walk in address order) instead of a (token, kv head, range) unit over a slice of each row (stop 44, SmolLM2 at
  // two threads, d4096, on an Intel Xeon: AVX-512 1.05x a token, AVX2 level).
  const int64_t ranges_rows = balanced_parts(T, range_cap, n_threads);
  const bool rows_k = heads_ok && f16->dots_f16_groups && hq <= (dk == 64 ? kMaxGroupsWalk : kMaxGroupStaged) &&
                      min_vis >= f16->groups_min_cells && (T * ranges_rows) % n_threads == 0;
  const int64_t ranges = rows_k ? ranges_rows : heads ? ranges_heads : balanced_parts(pairs, range_cap, n_threads);
  const int64_t col_cap = std::clamp<int64_t>(dv / 16, 1, nth_pool);
  const int64_t col_parts_heads =
      heads_ok && simd.accumulate_f16_heads ? fewest_balanced_parts(groups, col_cap, n_threads) : 0;
  const bool heads_v = col_parts_heads > 0;
  const int64_t col_parts = heads_v ? col_parts_heads : balanced_parts(pairs, col_cap, n_threads);
  // Range r of n cells: whole 64-cell groups (16-cell softmax chunks, kQuantChunk widenings) but the last.
  auto bound = [](int64_t n, int64_t r, int64_t parts) { return r == parts ? n : n * r / parts / 64 * 64; };
  auto col_bound = [&](int64_t r) { return r == col_parts ? dv : dv * r / col_parts / 16 * 16; };
  auto thread_work = [&](int slot) { return ctx.work + shared_bytes(node) + per_thread_bytes(node) * uint64_t(slot); };
  const auto reduce = simd.reduce_lanes ? simd.reduce_lanes : reduce_lanes;

  // Scale, window and maximum of cells [c0, c1) of one pair's scores (unit u of the dots).
  auto range_max = [&](float* sc, int64_t t, int64_t c0, int64_t c1, const int32_t* vis) {
    float mx = -INFINITY;
    if (window <= 0) {
      mx = simd.scale_max(sc + c0, c1 - c0, scale);
    } else {
      const int32_t pos = tok[2 * t];
      for (int64_t c = c0; c < c1; ++c) {
        sc[c] = pos - cell[2 * vis[c]] >= window ? -INFINITY : sc[c] * scale;
        mx = std::max(mx, sc[c]);
      }
    }
    return mx;
  };
  const int64_t k_units = (rows_k ? T : heads ? groups : pairs) * ranges;
  ctx.pool.run_chunks(int(k_units), [&](int u, int, int slot) {  // 1. dots
    uint8_t* w = thread_work(slot);
    float* qv = reinterpret_cast<float*>(w + l.off_q);
    float* kchunk = reinterpret_cast<float*>(w + l.off_kchunk);
    if (rows_k) {  // (token, range) units
      const int64_t t = u / ranges, r = u % ranges, pair0 = t * hq;
      const int32_t* vis = vis_all + t * n_cells;
      const int64_t c0 = bound(nvis[t], r, ranges), c1 = bound(nvis[t], r + 1, ranges);
      for (int64_t j = 0; j < hq; ++j)
        round_activations(q_round, reinterpret_cast<const float*>(row_ptr(q, j, t, 0)), qv + j * dk, dk);
      f16->dots_f16_groups(static_cast<const uint8_t*>(k.data), k.nb[1], row_bytes(k.type, dk), vis + c0, c1 - c0, qv,
                           dk, hkv, group, dk, kq_lanes16, scores_all + pair0 * sl.ld_scores + c0, sl.ld_scores);
      for (int64_t j = 0; j < hq; ++j)
        maxes[(pair0 + j) * ranges + r] = range_max(scores_all + (pair0 + j) * sl.ld_scores, t, c0, c1, vis);
      return;
    }
    if (heads) {  // (token, kv head, range) units
      const int64_t tg = u / ranges, r = u % ranges, t = tg / hkv, g = tg % hkv, pair0 = t * hq + g * group;
      const int32_t* vis = vis_all + t * n_cells;
      const int64_t c0 = bound(nvis[t], r, ranges), c1 = bound(nvis[t], r + 1, ranges);
      for (int64_t j = 0; j < group; ++j)
        round_activations(q_round, reinterpret_cast<const float*>(row_ptr(q, g * group + j, t, 0)), qv + j * dk, dk);
      const uint8_t* kbase = static_cast<const uint8_t*>(k.data) + row_bytes(k.type, g * dk);
      f16->dots_f16_heads(kbase, k.nb[1], vis + c0, c1 - c0, qv, dk, group, dk, kq_lanes16,
                          scores_all + pair0 * sl.ld_scores + c0, sl.ld_scores);
      for (int64_t j = 0; j < group; ++j)
        maxes[(pair0 + j) * ranges + r] = range_max(scores_all + (pair0 + j) * sl.ld_scores, t, c0, c1, vis);
      return;
    }
    const int64_t pair = u / ranges, r = u % ranges, t = pair / hq, h = pair % hq, g = h / group;
    const int32_t* vis = vis_all + t * n_cells;
    const int64_t c0 = bound(nvis[t], r, ranges), c1 = bound(nvis[t], r + 1, ranges);
    float* sc = scores_all + pair * sl.ld_scores;
    round_activations(q_round, reinterpret_cast<const float*>(row_ptr(q, h, t, 0)), qv, dk);
    const uint8_t* kbase = static_cast<const uint8_t*>(k.data) + row_bytes(k.type, g * dk);
    if (!quant_k) f16->dots_f16(kbase, k.nb[1], vis + c0, c1 - c0, qv, dk, kq_lanes16, sc + c0);
    for (int64_t r0 = c0; r0 < c1 && quant_k; r0 += kQuantChunk) {
      const int64_t nn = std::min(kQuantChunk, c1 - r0);
      if (k.type == DType::Q8_0) widen_k.widen_q8_0(kbase, k.nb[1], vis + r0, nn, dk, kchunk, dk);
      else widen_k.widen_q4_0(kbase, k.nb[1], vis + r0, nn, dk, kchunk, dk);
      simd.dots_f32_lanes16(kchunk, dk, &nn, qv, dk, 1, dk, sc + r0, 0);
    }
    maxes[u] = range_max(sc, t, c0, c1, vis);
  });
  ctx.pool.run_chunks(int(pairs), [&](int pair, int, int) {  // 2. softmax, pair by pair
    const int64_t n_vis = nvis[pair / hq];
    float* sc = scores_all + pair * sl.ld_scores;
    float mx = -INFINITY;
    for (int64_t r = 0; r < ranges; ++r) mx = std::max(mx, maxes[pair * ranges + r]);
    maxes[pair * ranges] = mx;  // for pass 3
    if (mx == -INFINITY) return;
    const int64_t n_chunked = (n_vis + 15) / 16 * 16;
    for (int64_t r = n_vis; r < n_chunked; ++r) sc[r] = -INFINITY;
    simd.scale_round_f16(sc, n_vis, float(1.0 / simd.softmax_exp(sc, n_chunked, mx)));
  });
  const int64_t v_parts = split_v_parts(simd, T, dv, lanes, n_threads);
  const int64_t v_units = v_parts ? v_parts : (heads_v ? groups : pairs) * col_parts;
  float* lanes_all = reinterpret_cast<float*>(sw + sl.off_acc);  // v_parts: [head][lane][dv]
  bool v_empty = false;  // v_parts: a head with no visible cell (cannot happen: a token sees itself)
  for (int64_t j = 0; v_parts && j < hq; ++j) v_empty = v_empty || maxes[j * ranges] == -INFINITY;
  ctx.pool.run_chunks(int(v_units), [&](int u, int, int slot) {  // 3. V
    float* acc = reinterpret_cast<float*>(thread_work(slot) + l.off_acc);
    // Columns [i0, i0 + cols) of one pair's output.
    auto pair_v = [&](int64_t pair, int64_t i0, int64_t cols) {
      const int64_t t = pair / hq, h = pair % hq, g = h / group;
      float* out = reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + h * dv + i0;
      if (maxes[pair * ranges] == -INFINITY) {  // no visible cell (cannot happen): zeros, as the per-pair path
        std::fill(out, out + cols, 0.0f);
        return;
      }
      const int64_t n_vis = nvis[t], used = std::min(lanes, n_vis);
      std::fill(acc, acc + used * cols, 0.0f);
      simd.accumulate_f16(scores_all + pair * sl.ld_scores,
                          static_cast<const uint8_t*>(v.data) + uint64_t(g * dv + i0) * 2, v.nb[1],
                          vis_all + t * n_cells, n_vis, lanes, cols, acc);
      reduce(acc, lanes, used, cols, out);
    };
    if (v_parts) {  // (part of the lanes) units: those lanes of every head of the token, over whole V rows
      const int64_t n_vis = nvis[0], l0 = u * lanes / v_parts, l1 = std::min((u + 1) * lanes / v_parts, n_vis);
      if (v_empty) {  // the first part takes the pairs one by one, reduced
        if (u == 0)
          for (int64_t j = 0; j < hq; ++j) pair_v(j, 0, dv);
        return;
      }
      for (int64_t j = 0; j < hq && l0 < l1; ++j)
        std::fill(lanes_all + (j * lanes + l0) * dv, lanes_all + (j * lanes + l1) * dv, 0.0f);
      if (l0 < l1)
        simd.accumulate_f16_groups(scores_all, sl.ld_scores, hkv, group, static_cast<const uint8_t*>(v.data), v.nb[1],
                                   uint64_t(dv) * 2, vis_all, n_vis, lanes, l0, l1, dv, lanes_all);
      return;
    }
    const int64_t i0 = col_bound(u % col_parts), cols = col_bound(u % col_parts + 1) - i0;
    if (!heads_v) return pair_v(u / col_parts, i0, cols);
    const int64_t tg = u / col_parts, t = tg / hkv, g = tg % hkv, pair0 = t * hq + g * group;
    bool empty = false;
    for (int64_t j = 0; j < group; ++j) empty = empty || maxes[(pair0 + j) * ranges] == -INFINITY;
    if (empty) {  // cannot happen (a token sees itself): the pairs one by one
      for (int64_t j = 0; j < group; ++j) pair_v(pair0 + j, i0, cols);
      return;
    }
    const int64_t n_vis = nvis[t], used = std::min(lanes, n_vis);
    for (int64_t j = 0; j < group; ++j) std::fill(acc + j * lanes * cols, acc + j * lanes * cols + used * cols, 0.0f);
    simd.accumulate_f16_heads(scores_all + pair0 * sl.ld_scores, sl.ld_scores, group,
                              static_cast<const uint8_t*>(v.data) + uint64_t(g * dv + i0) * 2, v.nb[1],
                              vis_all + t * n_cells, n_vis, lanes, cols, acc);
    for (int64_t j = 0; j < group; ++j)
      reduce(acc + j * lanes * cols, lanes, used, cols,
             reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + (g * group + j) * dv + i0);
  });
  if (!v_parts || v_empty) return;
  ctx.pool.run_chunks(int(hq), [&](int h, int, int) {  // 4. the lanes' reductions
    reduce(lanes_all + h * lanes * dv, lanes, std::min(lanes, nvis[0]), dv,
           reinterpret_cast<float*>(row_ptr(node, 0, 0, 0)) + h * dv);
  });
}

}  // namespace

int64_t live_cell_count(const Tensor& cells, const OpContext& ctx) {
  const int32_t* cell = static_cast<const int32_t*>(cells.data);
  const int64_t n_cells = cells.ne[1];
  LiveCellsMemo* m = ctx.live_cells;
  int slot = -1;
  for (int i = 0; m && i < LiveCellsMemo::kEntries; ++i) {
    if (m->cells[i] == cells.data && m->n_cells[i] == n_cells) return m->n_live[i];
    if (slot < 0 && !m->cells[i]) slot = i;
  }
  int64_t n_live = 0;
  for (int64_t c = n_cells; c-- > 0;)
    if (cell[2 * c + 1] >= 0) {
      n_live = c + 1;
      break;
    }
  if (m && slot >= 0) {
    m->cells[slot] = cells.data;
    m->n_cells[slot] = n_cells;
    m->n_live[slot] = n_live;
  }
  return n_live;
}

void compute_kv_store(const Tensor& node, const OpContext& ctx) {
  const Tensor& cache = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& cells = *node.src[2];
  const int64_t E = cache.ne[0], T = cells.ne[0];
  const AttnKernels* simd = cache.type == DType::F16 ? attn_kernels() : nullptr;  // vcvtps2ph: the same bits
  const bool quantized = dtype_traits(cache.type).quantized;                      // q8_0, q4_0: whole 32-blocks per row
  auto store = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t c = static_cast<const int32_t*>(cells.data)[t];
      if (c < 0 || c >= cache.ne[1]) continue;  // validated by the runtime
      const float* src = static_cast<const float*>(x.data) + t * E;
      uint8_t* dst = static_cast<uint8_t*>(cache.data) + uint64_t(c) * cache.nb[1];
      if (simd && simd->to_f16) simd->to_f16(src, reinterpret_cast<uint16_t*>(dst), E);
      else if (quantized) quantize_rows(cache.type, src, dst, 1, E);  // llama.cpp's reference quantizer
      else row_from_f32(cache.type, src, dst, E);
    }
  };
  if (T <= 4) return store(0, T);  // decode: not worth waking the pool
  ctx.pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T, ith, nth, &t0, &t1);
    store(t0, t1);
  });
}

void compute_attention(const Tensor& node, const OpContext& ctx) {
  if (node.iparams[2]) return compute_attention_flash(node, ctx);
  const Tensor& q = *node.src[kAttnQ];
  const Tensor& k = *node.src[kAttnK];
  const Tensor& v = *node.src[kAttnV];
  const int32_t* tok = static_cast<const int32_t*>(node.src[kAttnTokens]->data);
  const int32_t* cell = static_cast<const int32_t*>(node.src[kAttnCells]->data);
  const int64_t hkv = node.iparams[0];
  const int32_t window = node.iparams[1];
  const float scale = node.fparams[0];
  const int64_t dk = q.ne[0], hq = q.ne[1], T = q.ne[2], dv = attention_dv(node);
  const int64_t group = hq / hkv;
  const bool round_k = k.type != DType::F32;  // llama.cpp converts q to the cache type (q8_0 for a quantized one)
  const bool quant_k = k.type == DType::Q8_0 || k.type == DType::Q4_0;
  const DType q_round = quant_k ? DType::Q8_0 : k.type;
  const bool round_v = v.type != DType::F32;
  const AttnLayout l = attn_layout(node);
  const uint64_t vrow = uint64_t(type_size(v.type));
  // The block path takes an f16 or quantized K (widened to f32 once per block) with an f16 V; the
  // per-(token, head) path's SIMD helpers read f16 K and V only.
  const AttnKernels* block_simd = (k.type == DType::F16 || quant_k) && v.type == DType::F16 ? attn_kernels() : nullptr;
  const AttnKernels* simd = k.type == DType::F16 ? block_simd : nullptr;
  // The softmax and the f16 V helpers also serve a quantized K (its rows dequantized by the tiled path's widening).
  const AttnKernels* simd_v = quant_k ? block_simd : simd;
  const FlashKernels& widen_k = flash_kernels();
  // llama.cpp's MUL_MAT takes tinyBLAS (llamafile sgemm) for >= 2 tokens when
  // the row length is a multiple of 16, else ggml_vec_dot.
  const bool batched = T >= 2;
  // With an f32 cache q needs no conversion, so ggml skips its second
  // llamafile attempt (q is a permuted, non-contiguous view) and takes
  // ggml_vec_dot_f32 for K*Q even for a batch.
  const bool kq_lanes16 = batched && dk % 16 == 0 && k.type != DType::F32;
  const int64_t lanes = batched ? kLanesBatch : kLanesSingle;
  const bool vec_f32_tail = k.type == DType::F32;  // ggml_vec_dot_f32 sums its tail in float
  // Only cells up to the last one in use can be visible (llama.cpp's n_kv):
  // a short prompt in a large context does not scan the whole cache.
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
  const AttnKernels* bs = block_simd;
  if (kq_lanes16 && bs && bs->widen_f16 && bs->dots_f32_lanes16 && bs->attend_v_lanes16_keep && bs->reduce_lanes &&
      bs->scale_max && bs->scale_round_f16 && bs->softmax_exp)
    return attention_blocks(node, ctx, order, n_order, *bs, q_round);

  // A decode's pairs that do not divide evenly among the threads: split inside the pairs (the same bits).
  const int nth_pool = ctx.pool.size();
  const bool split_f16 = simd && simd->dots_f16 && simd->accumulate_f16;
  const bool split_quant = quant_k && simd_v && simd_v->dots_f32_lanes16 && dk % 16 == 0;
  // Pairs that do divide evenly split too where V can then go by parts of the lanes (split_v_parts) and K by cell
  // ranges over whole rows: each thread reads whole rows or whole parts of rows, in address order, instead of its
  // kv heads' slice of every row (an Intel Xeon at two threads, stop 46: Qwen3 1.08-1.14x a token at d2048-d8192,
  // Llama-3.2-1B 1.10-1.23x; `--isa avx2` 1.12x / 1.03x at d4096).
  // (The split's K takes whole rows only for GQA heads it stages: rows_k there.)
  const bool split_rows = split_f16 && simd->dots_f16_groups && simd->dots_f16_heads && group > 1 &&
                          group <= kMaxGroupStaged && hq <= (dk == 64 ? kMaxGroupsWalk : kMaxGroupStaged) && simd_v &&
                          split_v_parts(*simd_v, T, dv, lanes, ctx.pool.n_threads()) > 0;
  if (T <= kSplitMaxTokens && nth_pool > 1 && ((T * hq) % nth_pool != 0 || split_rows) && (split_f16 || split_quant) &&
      simd_v->accumulate_f16 && simd_v->softmax_exp && simd_v->scale_round_f16 && simd_v->scale_max &&
      v.type == DType::F16 && n_order >= split_min_cells())
    return attention_split_pairs(node, ctx, order, n_order, *simd_v, split_f16 ? simd : nullptr, q_round, kq_lanes16,
                                 lanes);

  auto pairs = [&](int ith, int nth) {
    uint8_t* w = ctx.work + shared_bytes(node) + per_thread_bytes(node) * uint64_t(ith);
    float* score_rows = reinterpret_cast<float*>(w);  // one per head of a GQA group
    float* qv = reinterpret_cast<float*>(w + l.off_q);
    float* row = reinterpret_cast<float*>(w + l.off_row);
    float* acc = reinterpret_cast<float*>(w + l.off_acc);
    int32_t* vis = reinterpret_cast<int32_t*>(w + l.off_vis);  // visible cells, in cell order
    float* kchunk = reinterpret_cast<float*>(w + l.off_kchunk);
    int64_t p0, p1;
    split_range(T * hq, ith, nth, &p0, &p1);
    // The batched path's visible list depends on the token only: the heads of one token (every pair of a
    // decode) reuse it instead of scanning the cells again (at depth 4096 the scan cost about as much as a
    // head's dots).
    int32_t vis_seq = -1, vis_pos = 0;
    int64_t vis_n = 0;
    // Scores of one pair (q rounded, dots, scale, window): returns the maximum; n_vis and vis are set.
    auto pair_scores = [&](int64_t pair, float* scores, int64_t& n_vis) {
      const int64_t t = pair / hq, h = pair % hq, g = h / group;
      const int32_t pos = tok[2 * t], seq = tok[2 * t + 1];
      const float* qsrc = reinterpret_cast<const float*>(row_ptr(q, h, t, 0));
      if (round_k) round_activations(q_round, qsrc, qv, dk);
      else
        for (int64_t i = 0; i < dk; ++i) qv[i] = qsrc[i];
      float mx = -INFINITY;
      n_vis = 0;
      const bool batched_f16 = simd && simd->dots_f16 && simd->accumulate_f16;
      // A quantized K: its rows dequantized kQuantChunk at a time (the tiled path's widening), then SIMD dots in
      // tinyBLAS order (within float rounding of the other orders, as any quantized-K result here).
      const bool batched_quant = quant_k && simd_v && simd_v->dots_f32_lanes16 && dk % 16 == 0;
      const bool batched_simd = batched_f16 || batched_quant;
      if (batched_simd) {  // the same dots and FMAs, batched (kernels/attn_kernels.h)
        if (seq < 0 || seq != vis_seq || pos != vis_pos) {
          for (int64_t o = 0; o < n_order; ++o) {
            const int64_t c = order[o];
            if (cell[2 * c + 1] == seq && cell[2 * c] <= pos) vis[n_vis++] = int32_t(c);
          }
          vis_seq = seq, vis_pos = pos, vis_n = n_vis;
        }
        n_vis = vis_n;
        const uint8_t* kbase = static_cast<const uint8_t*>(k.data) + row_bytes(k.type, g * dk);
        if (batched_f16) simd->dots_f16(kbase, k.nb[1], vis, n_vis, qv, dk, kq_lanes16, scores);
        for (int64_t r0 = 0; r0 < n_vis && !batched_f16; r0 += kQuantChunk) {
          const int64_t nn = std::min(kQuantChunk, n_vis - r0);
          if (k.type == DType::Q8_0) widen_k.widen_q8_0(kbase, k.nb[1], vis + r0, nn, dk, kchunk, dk);
          else widen_k.widen_q4_0(kbase, k.nb[1], vis + r0, nn, dk, kchunk, dk);
          simd_v->dots_f32_lanes16(kchunk, dk, &nn, qv, dk, 1, dk, scores + r0, 0);
        }
        if (window <= 0 && simd_v->scale_max) {
          mx = simd_v->scale_max(scores, n_vis, scale);  // the loop below without a window, in SIMD
        } else {
          for (int64_t r = 0; r < n_vis; ++r) {
            scores[r] = window > 0 && pos - cell[2 * vis[r]] >= window ? -INFINITY : scores[r] * scale;
            mx = std::max(mx, scores[r]);
          }
        }
      }
      for (int64_t o = 0; o < n_order && !batched_simd; ++o) {
        const int64_t c = order[o];
        if (cell[2 * c + 1] != seq || cell[2 * c] > pos) continue;
        const uint8_t* krow_ptr =
            static_cast<const uint8_t*>(k.data) + uint64_t(c) * k.nb[1] + row_bytes(k.type, g * dk);
        float s;
        if (simd) {
          const uint16_t* kh = reinterpret_cast<const uint16_t*>(krow_ptr);
          s = kq_lanes16 ? simd->dot_f16_lanes16(kh, qv, dk) : simd->dot_f16_vec(kh, qv, dk);
        } else {
          const int32_t here = 0;
          if (k.type == DType::Q8_0) widen_k.widen_q8_0(krow_ptr, 0, &here, 1, dk, row, dk);
          else if (k.type == DType::Q4_0) widen_k.widen_q4_0(krow_ptr, 0, &here, 1, dk, row, dk);
          else row_to_f32(k.type, krow_ptr, row, dk);
          s = kq_lanes16 ? lo::dot_lanes16(row, qv, dk)
                         : (vec_f32_tail ? lo::dot_vec_f32(row, qv, dk) : lo::dot_vec_f16(row, qv, dk));
        }
        vis[n_vis] = int32_t(c);
        scores[n_vis] = window > 0 && pos - cell[2 * c] >= window ? -INFINITY : s * scale;
        mx = std::max(mx, scores[n_vis]);
        ++n_vis;
      }
      return mx;
    };
    // The probabilities of one pair from its scores (mx > -inf): softmax, p in the cache type.
    auto pair_probs = [&](float* scores, int64_t n_vis, float mx) {
      // ggml_vec_soft_max_f32: 16-cell chunks; masked cells give exact zeros.
      const int64_t n_chunked = (n_vis + 15) / 16 * 16;
      for (int64_t r = n_vis; r < n_chunked; ++r) scores[r] = -INFINITY;
      double sum = 0.0;
      // exp_sum_block where the ISA has it (AVX2: several exponentials side by side, the same values and sum).
      if (simd_v && simd_v->softmax_exp)
        sum = (simd_v->exp_sum_block ? simd_v->exp_sum_block : simd_v->softmax_exp)(scores, n_chunked, mx);
      for (int64_t c0 = 0; c0 < n_chunked && !(simd_v && simd_v->softmax_exp); c0 += 16) {
        float* e = scores + c0;
        for (int j = 0; j < 16; ++j) e[j] = e[j] == -INFINITY ? 0.0f : lo::expf_avx512(e[j] - mx);
        sum += double(lo::reduce_add16(e));
      }
      const float inv = float(1.0 / sum);
      if (round_v && v.type == DType::F16 && simd_v && simd_v->scale_round_f16) {
        simd_v->scale_round_f16(scores, n_vis, inv);  // the two steps below at once (the same bits)
      } else {
        for (int64_t r = 0; r < n_vis; ++r) scores[r] *= inv;
        if (round_v) round_activations(v.type, scores, scores, n_vis);  // p in the cache type, one call per row
      }
    };
    // The output of one pair from its scores: softmax, p in the cache type, the lanes of V, their reduction.
    auto pair_output = [&](int64_t pair, float* scores, int64_t n_vis, float mx) {
      const int64_t t = pair / hq, h = pair % hq, g = h / group;
      float* out = reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + h * dv;
      if (mx == -INFINITY) {  // no visible cell (cannot happen: a token sees itself)
        for (int64_t i = 0; i < dv; ++i) out[i] = 0.0f;
        return;
      }
      pair_probs(scores, n_vis, mx);
      if (simd_v && simd_v->accumulate_reduce_f16 && lanes == kLanesSingle && dv % 16 == 0 &&
          n_vis <= kFusedVMaxCells && v.type == DType::F16) {
        simd_v->accumulate_reduce_f16(scores, static_cast<const uint8_t*>(v.data) + uint64_t(g * dv) * vrow, v.nb[1],
                                      vis, n_vis, dv, out);
        return;
      }
      const int64_t used = std::min(lanes, n_vis);
      for (int64_t i = 0; i < used * dv; ++i) acc[i] = 0.0f;
      const bool batched_v = simd_v && simd_v->accumulate_f16;
      if (batched_v)
        simd_v->accumulate_f16(scores, static_cast<const uint8_t*>(v.data) + uint64_t(g * dv) * vrow, v.nb[1], vis,
                               n_vis, lanes, dv, acc);
      for (int64_t r = 0; r < n_vis && !batched_v; ++r) {
        const int64_t c = vis[r];
        const float pc = scores[r];
        const uint8_t* vrow_ptr = static_cast<const uint8_t*>(v.data) + uint64_t(c) * v.nb[1] + uint64_t(g * dv) * vrow;
        float* lane_acc = acc + (r % lanes) * dv;
        if (simd_v) {
          simd_v->axpy_f16(pc, reinterpret_cast<const uint16_t*>(vrow_ptr), lane_acc, dv);
        } else {
          row_to_f32(v.type, vrow_ptr, row, dv);
          for (int64_t i = 0; i < dv; ++i) lane_acc[i] = std::fma(row[i], pc, lane_acc[i]);
        }
      }
      (simd_v && simd_v->reduce_lanes ? simd_v->reduce_lanes : reduce_lanes)(acc, lanes, used, dv, out);
    };
    // The outputs of the staged pairs [b0, b1) of one token (scores in score_rows, visible cells vis[0, n_vis)):
    // each pair's probabilities as pair_output's, then V for the heads of each kv head at once
    // (accumulate_f16_heads: each V row widened once for all of them, the kv head's slice of the cache read once
    // instead of once per head; with accumulate_f16_groups, for pairs of whole kv heads, every kv head's slice of a
    // row at once), then each head's lanes reduced. Every (head, lane, column) FMA chain is pair_output's, in the same
    // order.
    // rows: the score rows of the pairs (score_rows, or further rows where a token's kv heads took their scores
    // together).
    // [b0, b1) are two or more whole kv heads' runs of heads (one dots_f16_groups / accumulate_f16_groups call).
    auto whole_kv_heads = [&](int64_t b0, int64_t b1) {
      return b0 % group == 0 && (b1 - b0) % group == 0 && b1 - b0 > group;
    };
    auto heads_output = [&](int64_t b0, int64_t b1, const float* mx, int64_t n_vis, float* rows) {
      const int64_t t = b0 / hq, nh = b1 - b0, lds = l.ld_scores;
      for (int64_t j = 0; j < nh; ++j)
        if (mx[j] == -INFINITY) {  // cannot happen (a token sees itself): the per-pair path's zeros
          for (int64_t jj = 0; jj < nh; ++jj) pair_output(b0 + jj, rows + jj * lds, n_vis, mx[jj]);
          return;
        }
      for (int64_t j = 0; j < nh; ++j) pair_probs(rows + j * lds, n_vis, mx[j]);
      const int64_t used = std::min(lanes, n_vis);
      for (int64_t j = 0; j < nh; ++j) std::fill(acc + j * lanes * dv, acc + j * lanes * dv + used * dv, 0.0f);
      const uint8_t* v0 = static_cast<const uint8_t*>(v.data);
      if (simd_v->accumulate_f16_groups && whole_kv_heads(b0, b1)) {  // whole rows at once
        simd_v->accumulate_f16_groups(rows, lds, nh / group, group, v0 + uint64_t(b0 % hq / group * dv) * vrow, v.nb[1],
                                      uint64_t(dv) * vrow, vis, n_vis, lanes, 0, lanes, dv, acc);
      } else {
        for (int64_t j = 0; j < nh;) {  // the runs of heads of one kv head
          const int64_t g = (b0 + j) % hq / group;
          int64_t je = j + 1;
          while (je < nh && (b0 + je) % hq / group == g) ++je;
          simd_v->accumulate_f16_heads(rows + j * lds, lds, je - j, v0 + uint64_t(g * dv) * vrow, v.nb[1], vis, n_vis,
                                       lanes, dv, acc + j * lanes * dv);
          j = je;
        }
      }
      for (int64_t j = 0; j < nh; ++j)
        (simd_v->reduce_lanes ? simd_v->reduce_lanes : reduce_lanes)(
            acc + j * lanes * dv, lanes, used, dv,
            reinterpret_cast<float*>(row_ptr(node, t, 0, 0)) + (b0 + j) % hq * dv);
    };
    // With the SIMD dots (an f16 K, or a quantized one widened kQuantChunk rows at a time), the heads of one token
    // (up to kMaxGroupStaged) take their scores together, kStageCells cells at a time for every head, and the next
    // step's whole cache rows (every kv head) are prefetched first: the K rows are read once, in address order,
    // instead of once per head as 128-512-byte slices of each row (a quantized K's chunk is widened once per kv
    // head, not once per head). Each (pair, cell) dot is the kernel's own (dots_f16 gives a cell the same bits
    // in any run of whole 16s, AttnBatched.ChunksOfWhole64CellsGiveTheBitsOfOneCall), so nothing changes a bit.
    // At one thread, d4096, bench_attn_decode (docs/PERF.md "Stop 17, kv"): Qwen3's fa 0 decode ATTENTION per layer
    // about a third shorter.
    // An f16 K stages only heads of 128+ dims: SmolLM2's 128-byte slices (its 3 heads of a kv head re-read a
    // 512 KiB slice set from L2 at d4096) ran 10-15 % slower staged, Qwen3's 256-byte ones (1 MiB, past L2)
    // 15-25 % faster. A quantized K always stages (it also widens each chunk once per kv head, not per head).
    // Below kStageMinF16Cells live cells the slices stay in L2 and staging only adds its bookkeeping (Qwen3
    // Q4_K_M tg128 at one thread read 3-11 % slower staged in the lead's stop 17 A/B), so short contexts keep
    // the per-head walk. Where the table has groups_staged (AVX-512 where the decode prefetches, stop 45) a token's
    // whole kv heads take their K dots in one dots_f16_groups walk over whole rows instead of the 64-cell steps.
    const bool stage_f16 = simd && simd->dots_f16 && simd->accumulate_f16 && dk >= 128 && n_order >= kStageMinF16Cells;
    const bool stage_quant = quant_k && simd_v && simd_v->dots_f32_lanes16 && dk % 16 == 0;
    // The staged heads' V goes through heads_output for heads of 128+ values from the ISA's heads_min_cells
    // visible cells (Qwen3's 256-byte V slices, 1 MiB per kv head at d4096, were read again from L2 / L3 by the
    // second head of each kv head; SmolLM2's 64-value heads, whose 512 KiB slice set stays in L2 for the next
    // head, ran 5-25 % slower that way, docs/PERF.md "Stop 19, fa0d").
    const bool heads_v = v.type == DType::F16 && dv >= 128 && simd_v && simd_v->accumulate_f16_heads;
    // groups_k: [b0, b1) are whole kv heads' runs of heads, whose K dots go through one dots_f16_groups call.
    auto stage_scores = [&](int64_t b0, int64_t b1, float* mx_out, int64_t* nv_out, int64_t step,
                            bool groups_k = false) {
      const int64_t t = b0 / hq;
      const int32_t pos = tok[2 * t], seq = tok[2 * t + 1];
      if (seq < 0 || seq != vis_seq || pos != vis_pos) {
        int64_t n = 0;
        for (int64_t o = 0; o < n_order; ++o) {
          const int64_t c = order[o];
          if (cell[2 * c + 1] == seq && cell[2 * c] <= pos) vis[n++] = int32_t(c);
        }
        vis_seq = seq, vis_pos = pos, vis_n = n;
      }
      const int64_t n_vis = vis_n;
      for (int64_t j = b0; j < b1; ++j)
        round_activations(q_round, reinterpret_cast<const float*>(row_ptr(q, j % hq, t, 0)), qv + (j - b0) * dk, dk);
      const uint8_t* k0 = static_cast<const uint8_t*>(k.data);
      // The bytes of a cell's row that the staged heads read (their kv heads, side by side).
      const uint64_t k_first = row_bytes(k.type, b0 % hq / group * dk);
      const uint64_t k_end = row_bytes(k.type, ((b1 - 1) % hq / group + 1) * dk);
      for (int64_t c0 = 0; c0 < n_vis; c0 += step) {
        const int64_t nn = std::min(step, n_vis - c0);
        for (int64_t r = c0 + step; r < std::min(n_vis, c0 + 2 * step); ++r)
          for (uint64_t o = k_first; o < k_end; o += 64) __builtin_prefetch(k0 + uint64_t(vis[r]) * k.nb[1] + o);
        int64_t g_widened = -1;
        if (groups_k) {
          simd->dots_f16_groups(k0 + row_bytes(k.type, b0 % hq / group * dk), k.nb[1], row_bytes(k.type, dk), vis + c0,
                                nn, qv, dk, (b1 - b0) / group, group, dk, kq_lanes16, score_rows + c0, l.ld_scores);
          continue;
        }
        for (int64_t j = b0; j < b1; ++j) {
          const int64_t g = j % hq / group;
          const uint8_t* kbase = k0 + row_bytes(k.type, g * dk);
          float* sc = score_rows + (j - b0) * l.ld_scores + c0;
          if (!stage_quant) {  // the run of heads of kv head g at once (dots_f16_heads), else one head
            int64_t je = j + 1;
            while (simd->dots_f16_heads && je < b1 && je % hq / group == g) ++je;
            if (je - j > 1)
              simd->dots_f16_heads(kbase, k.nb[1], vis + c0, nn, qv + (j - b0) * dk, dk, je - j, dk, kq_lanes16, sc,
                                   l.ld_scores);
            else simd->dots_f16(kbase, k.nb[1], vis + c0, nn, qv + (j - b0) * dk, dk, kq_lanes16, sc);
            j = je - 1;
            continue;
          }
          if (g != g_widened) {
            if (k.type == DType::Q8_0) widen_k.widen_q8_0(kbase, k.nb[1], vis + c0, nn, dk, kchunk, dk);
            else widen_k.widen_q4_0(kbase, k.nb[1], vis + c0, nn, dk, kchunk, dk);
            g_widened = g;
          }
          simd_v->dots_f32_lanes16(kchunk, dk, &nn, qv + (j - b0) * dk, dk, 1, dk, sc, 0);
        }
      }
      for (int64_t j = b0; j < b1; ++j) {  // scale, window and maximum as pair_scores
        float* sc = score_rows + (j - b0) * l.ld_scores;
        float mx = -INFINITY;
        if (window <= 0 && simd_v->scale_max) {
          mx = simd_v->scale_max(sc, n_vis, scale);
        } else {
          for (int64_t r = 0; r < n_vis; ++r) {
            sc[r] = window > 0 && pos - cell[2 * vis[r]] >= window ? -INFINITY : sc[r] * scale;
            mx = std::max(mx, sc[r]);
          }
        }
        mx_out[j - b0] = mx;
        nv_out[j - b0] = n_vis;
      }
    };
    float mxs[kMaxGroupsWalk];
    int64_t nvs[kMaxGroupsWalk];
    for (int64_t pair = p0; pair < p1 && (stage_f16 || stage_quant);) {
      int64_t end = pair + 1;
      while (end < p1 && end - pair < kMaxGroupStaged && end / hq == pair / hq) ++end;
      // With groups_staged a run of whole kv heads takes its K dots in one walk over whole rows (dots_f16_groups).
      const bool rows_k = stage_f16 && simd->groups_staged && simd->dots_f16_groups && whole_kv_heads(pair, end);
      stage_scores(pair, end, mxs, nvs,
                   stage_quant ? kQuantChunk
                   : rows_k    ? std::max<int64_t>(n_order, 1)
                               : kStageCells,
                   rows_k);
      const bool heads = heads_v && nvs[0] >= simd_v->heads_min_cells;
      if (heads) heads_output(pair, end, mxs, nvs[0], score_rows);
      for (int64_t j = pair; j < end && !heads; ++j)
        pair_output(j, score_rows + (j - pair) * l.ld_scores, nvs[j - pair], mxs[j - pair]);
      pair = end;
    }
    // Otherwise the heads of one kv head for one token go together: the scores of all of them first (the K rows
    // of the kv head read again while they are still in cache), then their outputs (likewise the V rows).
    // Each pair's arithmetic is unchanged; only the order of the pairs' phases. With dots_f16_heads an f16 K's
    // scores of the group come from stage_scores in one step over every visible cell: each K row widened once for
    // all the group's heads (the same dots, the same bits as pair_scores').
    const bool group_f16 = simd && simd->dots_f16 && simd->accumulate_f16 && simd->dots_f16_heads;
    // Heads of under 128 values take V together too (heads_output) from the ISA's heads_small_min_cells visible
    // cells (AVX2: each V row read once, in address order, for the group's heads), or heads_small4_min_cells for
    // a group of four or more (Llama-3.2-1B: AVX-512's four-head tiles too, at every depth).
    const bool heads_small =
        v.type == DType::F16 && dv < 128 && simd_v && simd_v->accumulate_f16_heads && simd_v->reduce_lanes;
    // A token's kv heads whole in this thread's range (a one-thread decode): with dots_f16_groups their K dots in
    // one walk over the rows (each K row read once, whole: SmolLM2 -fa 0 one thread, AVX2, and AVX-512 where the
    // decode prefetches: on an Intel Xeon at d4096 SmolLM2 1.15x, Llama-3.2-1B 1.11x a token), then each kv head's
    // outputs as below. The same dots, probabilities and V chains per pair. Heads of 64 dims hold up to
    // kMaxGroupsWalk score rows (Llama-3.2-1B's 8 x 4 heads: one walk over its 1 KiB rows instead of eight over a
    // 128-byte slice each; two walks over half rows were 30-40 % slower, docs/perf/long-contexts3.md "Stop 30, fa0w").
    const int64_t walk_heads = std::min(hq, dk == 64 ? kMaxGroupsWalk : kMaxGroupStaged) / group * group;
    const bool groups_ok =
        group_f16 && simd->dots_f16_groups && group > 1 && walk_heads > group && n_order >= simd->groups_min_cells;
    for (int64_t pair = p0; pair < p1 && groups_ok && !(stage_f16 || stage_quant);) {
      const int64_t tok_end = std::min(p1, (pair / hq + 1) * hq);
      if (!whole_kv_heads(pair, tok_end)) break;
      const int64_t walk_end = std::min(tok_end, pair + walk_heads);
      stage_scores(pair, walk_end, mxs, nvs, std::max<int64_t>(n_order, 1), true);
      const bool heads = nvs[0] > 0 && heads_small &&
                         nvs[0] >= (group >= 4 ? simd_v->heads_small4_min_cells : simd_v->heads_small_min_cells);
      // With accumulate_f16_groups every kv head's V in one walk over whole rows, as their K dots.
      const bool rows_v = heads && simd_v->accumulate_f16_groups && nvs[0] >= simd_v->groups_v_small_min_cells;
      if (rows_v) heads_output(pair, walk_end, mxs, nvs[0], score_rows);
      for (int64_t j = pair; j < walk_end && !rows_v; j += group) {
        float* rows = score_rows + (j - pair) * l.ld_scores;
        if (heads) heads_output(j, j + group, mxs + (j - pair), nvs[0], rows);
        for (int64_t jj = j; jj < j + group && !heads; ++jj)
          pair_output(jj, rows + (jj - j) * l.ld_scores, nvs[jj - pair], mxs[jj - pair]);
      }
      p0 = pair = walk_end;
    }
    for (int64_t pair = p0; pair < p1 && !(stage_f16 || stage_quant);) {
      const int64_t tg = pair / hq * hkv + pair % hq / group;
      int64_t end = pair + 1;
      while (end < p1 && end - pair < std::min<int64_t>(group, kMaxGroupStaged) &&
             end / hq * hkv + end % hq / group == tg)
        ++end;
      if (group_f16 && end - pair > 1) stage_scores(pair, end, mxs, nvs, std::max<int64_t>(n_order, 1));
      for (int64_t j = pair; j < end && !(group_f16 && end - pair > 1); ++j)
        mxs[j - pair] = pair_scores(j, score_rows + (j - pair) * l.ld_scores, nvs[j - pair]);
      const bool heads = nvs[0] > 0 && heads_small && end - pair > 1 &&  // one token: the same cells
                         nvs[0] >= (end - pair >= 4 ? simd_v->heads_small4_min_cells : simd_v->heads_small_min_cells);
      if (heads) heads_output(pair, end, mxs, nvs[0], score_rows);
      for (int64_t j = pair; j < end && !heads; ++j)
        pair_output(j, score_rows + (j - pair) * l.ld_scores, nvs[j - pair], mxs[j - pair]);
      pair = end;
    }
  };
  if (T == 1 && hq * n_order <= serial_max_work()) pairs(0, 1);
  else ctx.pool.run(pairs);
}

}  // namespace opal::cpu
