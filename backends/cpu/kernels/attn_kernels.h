// Vector helpers for CPU attention over an f16 KV cache, per ISA (the
// matmul kernels' dispatch: isa.h). Null under the scalar ISA, where
// ops/attention.cpp uses the scalar forms of kernels/llama_order.h.
// Every helper returns exactly what its scalar form returns (llama.cpp's
// summation orders), so the ISA never changes a result.
#pragma once
#include <cstdint>

namespace opal::cpu {

struct AttnKernels {
  const char* name;
  // sum_i f16(k[i]) * q[i] in tinyBLAS order (llama_order::dot_lanes16); n % 16 == 0.
  float (*dot_f16_lanes16)(const uint16_t* k, const float* q, int64_t n);
  // The same in ggml_vec_dot_f16 order (llama_order::dot_vec_f16).
  float (*dot_f16_vec)(const uint16_t* k, const float* q, int64_t n);
  // acc[i] = fma(f16(v[i]), p, acc[i]).
  void (*axpy_f16)(float p, const uint16_t* v, float* acc, int64_t n);
  // Optional batched forms (null: ops/attention.cpp loops over the ones above;
  // the results are the same bits):
  // out[r] = dot of the k row of cell cells[r] (at k + cells[r] * k_stride bytes)
  // with q, in tinyBLAS order when lanes16, else in ggml_vec_dot_f16 order.
  void (*dots_f16)(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q, int64_t dk,
                   bool lanes16, float* out);
  // For r in order: acc[(r % lanes) * dv + i] = fma(f16(v_r[i]), p[r], ...), v_r
  // the v row of cell cells[r].
  void (*accumulate_f16)(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                         int64_t lanes, int64_t dv, float* acc);
  // ggml_vec_soft_max_f32's exponentials over n (a multiple of 16) scores:
  // s = s == -inf ? 0 : expf_avx512(s - mx) in place; returns the sum of the
  // 16-cell chunks' reduce_add16, accumulated in double.
  double (*softmax_exp)(float* scores, int64_t n, float mx);
  // out[i] = the ggml reduction of the per-lane accumulators acc[lane * dv + i]
  // (lanes 16: reduce_add16 over them; lanes 64: (a0 + a2) + (a1 + a3) per
  // 16-lane group first); lanes >= used count as 0.
  void (*reduce_lanes)(const float* acc, int64_t lanes, int64_t used, int64_t dv, float* out);
  // dst[i] = f16(x[i]), round to nearest even (vcvtps2ph): the f16 KV store.
  void (*to_f16)(const float* x, uint16_t* dst, int64_t n);
  // Optional block forms for a batch (several query rows over one kv head,
  // the K and V rows widened to f32 once; null: ops/attention.cpp runs the
  // per-(token, head) path above, with the same bits):
  // dst[r * ld + i] = f32(f16 row of cell cells[r])[i], i < d (exact).
  void (*widen_f16)(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                    int64_t ld);
  // out[j * ldo + r] = llama_order::dot_lanes16(k + r * ldk, q + j * ldq, dk)
  // for j < m, r < n[j] (nothing else is written); dk % 16 == 0.
  void (*dots_f32_lanes16)(const float* k, int64_t ldk, const int64_t* n, const float* q, int64_t ldq, int64_t m,
                           int64_t dk, float* out, int64_t ldo);
  // out[j][i] = reduce_lanes(acc, 16, min(16, n_vis[j]), dv) for query j < m,
  // where acc[(r % 16) * dv + i] = fma(v_r[i], p[j * ldp + r], ...) for
  // r < n_vis[j] in order, from 0: accumulate_f16 and reduce_lanes at once.
  // The rows are stored lane by lane: v_r = v + ((r % 16) * lane_rows + r / 16) * ldv.
  void (*attend_v_lanes16)(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v, int64_t ldv,
                           int64_t lane_rows, int64_t dv, float* const* out);
  // s[r] *= scale for r < n; returns the fold m = std::max(m, s[r]) from
  // m = -inf (the first of equal values, NaN never).
  float (*scale_max)(float* s, int64_t n, float scale);
  // s[r] = f16(s[r] * inv) for r < n, round to nearest even (p in the cache type).
  void (*scale_round_f16)(float* s, int64_t n, float inv);
  // attend_v_lanes16 without the reduction, for a block walking its cells in
  // chunks: the 16 lane accumulators of query j (acc + (j * 16 + l) * dv + i)
  // start from what acc holds and are stored back, each lane's FMAs in the
  // cells' order; reduce_lanes(acc + j * 16 * dv, 16, 16, dv) after the last
  // chunk (acc zeroed before the first) gives attend_v_lanes16's bits.
  void (*attend_v_lanes16_keep)(const float* p, int64_t ldp, const int64_t* n_vis, int64_t m, const float* v,
                                int64_t ldv, int64_t lane_rows, int64_t dv, float* acc);
  // Optional (null: accumulate_f16 head by head, the same bits): accumulate_f16 for nh heads that read the
  // same V rows (the query heads of one kv head), head h's p at p + h * ldp and its lanes at
  // acc + h * lanes * dv; each V row is widened once for all of them, and each head's lanes keep their FMA chains
  // (calls over whole multiples of `lanes` cells continue them).
  void (*accumulate_f16_heads)(const float* p, int64_t ldp, int64_t nh, const uint8_t* v, uint64_t v_stride,
                               const int32_t* cells, int64_t n, int64_t lanes, int64_t dv, float* acc);
  // The fewest visible cells from which ops/attention.cpp's staged decode takes accumulate_f16_heads: below it a
  // kv head's V slice stays in cache for the next head, and one head at a time ran faster (0 on AVX-512 and on
  // AVX2, whose in-order form replaced the 32-column lane passes that had needed 8192 at stop 19).
  int64_t heads_min_cells;
  // p of a chunk of nc cells laid out lane by lane for attend_v_lanes16_cells: for j < m and r < nc,
  // pt[((r % 16) * lane_rows + r / 16) * ldt + j] = f16(s[j * lds + r] * inv[j]) (scale_round_f16's
  // value) where r < n[j], else 0 (inv[j] is not read when n[j] <= 0); ldt % 16 == 0, ldt >= m, and
  // lane_rows = (nc + 15) / 16. The columns m .. ldt - 1 may be written (zeros).
  void (*round_p_lanes)(const float* s, int64_t lds, const int64_t* n, const float* inv, int64_t m, int64_t nc,
                        int64_t lane_rows, float* pt, int64_t ldt);
  // attend_v_lanes16_keep (the same FMAs per accumulator, the same bits) with p from round_p_lanes
  // (query j, cell r at pt[((r % 16) * lane_rows + r / 16) * ldt + j]), walked lane by lane so that a
  // lane's V and p rows stay in L1 while every query tile runs over them (ops/attention.cpp's 1024-cell
  // chunks: each tile's accumulators loaded and stored once per lane, columns and chunk).
  void (*attend_v_lanes16_cells)(const float* pt, int64_t ldt, const int64_t* n_vis, int64_t m, const float* v,
                                 int64_t ldv, int64_t lane_rows, int64_t dv, float* acc);
  // widen_f16 (the same values) with the rows a few cells on prefetched into L1 while the current ones are
  // converted: a block's K and V rows, gathered 2 KB apart (Qwen3's 8 kv heads), come from L3 or DRAM.
  void (*widen_f16_ahead)(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                          int64_t ld);
  // Optional (null: dots_f16 head by head, the same bits): dots_f16 for the m query heads of one kv head, which
  // read the same K rows; head h's q at q + h * ldq, its scores at out + h * ldo. Each K vector is widened once
  // and feeds every head's accumulators; each head's score keeps dots_f16's order (dots_f16_heads_ref). AVX2
  // takes dk 64 and 128 in ggml_vec_dot_f16's order only (at 64 each accumulator one product; at 128 the
  // accumulators one at a time, each one's two K vectors widened once for two or three heads), else dots_f16 head by
  // head: with its 16 registers two or three heads' accumulators held over a row ran 5-15 % slower.
  void (*dots_f16_heads)(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q,
                         int64_t ldq, int64_t m, int64_t dk, bool lanes16, float* out, int64_t ldo);
  // heads_min_cells for heads of under 128 values (the unstaged decode's GQA group: SmolLM2, Llama-3.2-1B), where
  // the per-pair V was the rule (AVX2 0; AVX-512 8192 on AMD's cores: below, a kv head's slice set stays in L2 for
  // its next head and the per-pair lanes were as fast; from there its chunked heads read V once: SmolLM2 d16384 -14
  // to -30 %; AVX-512 512 where the decode prefetches, kAttnKernelsPrefetch: an Intel Xeon's per-pair V at d4096 ran
  // 1.18x slower, stop 44).
  int64_t heads_small_min_cells;
  // The same for groups of four or more query heads per kv head (Llama-3.2-1B): the per-pair V reads the kv head's
  // slice set once per head, the heads form once for all four (0 on both x86 ISAs).
  int64_t heads_small4_min_cells;
  // Optional (null: softmax_exp): softmax_exp for the block path (ops/attention.cpp's attention_blocks), the same
  // values and the same sum; n % 16 == 0. AVX2 runs several exponentials side by side.
  double (*exp_sum_block)(float* scores, int64_t n, float mx);
  // Optional (null: dots_f16_heads kv head by kv head, the same bits): dots_f16_heads for `groups` consecutive kv
  // heads of m query heads each, whose K slices lie group_bytes apart in a cache row: head g * m + h's q at
  // q + (g * m + h) * ldq, its scores at out + (g * m + h) * ldo. The decode reads each K row once, whole, in address
  // order, instead of once per kv head as slices (AVX2: dk 64 in ggml_vec_dot_f16's order, else kv head by kv head;
  // AVX-512 where the decode prefetches: 16 cells at a time, every kv head's dots_f16_heads on them).
  void (*dots_f16_groups)(const uint8_t* k, uint64_t k_stride, uint64_t group_bytes, const int32_t* cells, int64_t n,
                          const float* q, int64_t ldq, int64_t groups, int64_t m, int64_t dk, bool lanes16, float* out,
                          int64_t ldo);
  // Optional (null: accumulate_f16 into zeroed lanes, then reduce_lanes; the same bits): both at once for 64 lanes
  // and dv % 16 == 0, each lane's FMA chain from zero held in a register and the lanes reduced as reduce_lanes
  // adds them, with no lane accumulators in memory. For a short walk (a decode of a few hundred cells), where
  // zeroing, storing and reading back the 64 x dv accumulators cost more than the FMAs (AVX-512 and AVX2).
  void (*accumulate_reduce_f16)(const float* p, const uint8_t* v, uint64_t v_stride, const int32_t* cells, int64_t n,
                                int64_t dv, float* out);
  // The fewest live cells from which a one-thread decode takes dots_f16_groups (AVX2 0; AVX-512's
  // kAttnKernelsPrefetch 512: below, its 16-cell walk was 2 % of a SmolLM2 token slower at d0 than the per-kv-head
  // dots, level at d512, stop 44).
  int64_t groups_min_cells;
  // Optional (null: accumulate_f16_heads kv head by kv head, the same bits): accumulate_f16_heads for `groups`
  // consecutive kv heads of m query heads each, whose V slices lie group_bytes apart in a cache row: head g * m + h's
  // p at p + (g * m + h) * ldp, its lanes at acc + (g * m + h) * lanes * dv. Each V row is read once, whole, for
  // every kv head instead of once per kv head as a slice (both x86 ISAs' kAttnKernelsPrefetch). Each head's lanes
  // keep their FMA chains. Only lanes [lane_begin, lane_end) are walked and written (0, lanes: all of them; a split
  // decode's threads take a part each, attention_split_pairs); a part needs dv % 16 == 0.
  void (*accumulate_f16_groups)(const float* p, int64_t ldp, int64_t groups, int64_t m, const uint8_t* v,
                                uint64_t v_stride, uint64_t group_bytes, const int32_t* cells, int64_t n, int64_t lanes,
                                int64_t lane_begin, int64_t lane_end, int64_t dv, float* acc);
  // The fewest visible cells from which the one-thread walk over heads of under 128 values (SmolLM2, Llama-3.2-1B)
  // takes accumulate_f16_groups (AVX2 1024: at d0 and d512 a SmolLM2 token ran 1 % slower with it, d1024 2.5 %
  // faster; AVX-512 0, its heads_small_min_cells of 512 rules). The staged heads of 128+ values take it from their
  // 512 cells.
  int64_t groups_v_small_min_cells;
  // The staged decode of heads of 128+ values (Qwen3) takes a token's K dots in one dots_f16_groups walk over all its
  // cells instead of kStageCells steps of dots_f16_heads kv head by kv head (AVX-512 where the decode prefetches,
  // whose walk reads whole rows at dk 128; AVX2's takes dk 128 kv head by kv head).
  bool groups_staged;
};

// dots_f16_heads' scalar form (kernels/ref/attn_dots_ref.cpp): llama_order::dot_lanes16 or dot_vec_f16 of each
// (head, cell) over the widened K row.
void dots_f16_heads_ref(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q,
                        int64_t ldq, int64_t m, int64_t dk, bool lanes16, float* out, int64_t ldo);

// The selected ISA's helpers (falling back avx512 -> avx2), or null.
const AttnKernels* attn_kernels();

namespace avx2 {
extern const AttnKernels kAttnKernels;
// The same with accumulate_f16_groups, for hosts whose decode prefetches and that are not AMD's (an Intel Xeon ran a
// Qwen3 d4096 -fa 0 token 1.14x faster with it; AMD's Zen 5 ran the same walk 20-40 % slower, docs/perf/
// long-contexts3.md "Stop 32"): attn_kernels() picks it there.
extern const AttnKernels kAttnKernelsPrefetch;
}  // namespace avx2
namespace avx512 {
extern const AttnKernels kAttnKernels;
// The same with dots_f16_groups and both from 512 cells (groups_min_cells, heads_small_min_cells), for hosts whose
// decode prefetches (decode_prefetch()):
// attn_kernels() picks it there.
extern const AttnKernels kAttnKernelsPrefetch;
}  // namespace avx512

}  // namespace opal::cpu
