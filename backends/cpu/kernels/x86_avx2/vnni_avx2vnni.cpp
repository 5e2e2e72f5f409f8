// Q4_0, Q5_0 and Q8_0 prompt batches with AVX-VNNI (the VEX-encoded 256-bit
// vpdpbusd of Alder Lake, Zen 4 and later; the `avx2-vnni` ISA). Decode and
// small batches stay on the plain AVX2 kernels (bandwidth-bound there), so
// only the compute-bound batches come here.
//
// vpdpbusd multiplies unsigned by signed bytes and adds each 4 products to an
// int32 lane in one instruction, where plain AVX2 needs vpmaddubsw +
// vpmaddwd (+ vpsignb for signed Q8_0 weights). The weights are made unsigned
// by an offset: Q4_0's nibbles q in [0, 15] stand for q - 8 (Q5_0's five-bit
// q in [0, 31] for q - 16), a Q8_0 quant w
// becomes w + 128 (w xor 0x80); the offset times the activation block's sum
// starts the int32 sum, so the sums are exact:
//   sum((q - off) * x) = dpbusd(-off * sum(x), q_u8, x).
// Activation rows are convert_q8_0_sums rows (the Q8_0 blocks, then each
// block's d as f32 and its sum of quants as int32); Q8_0's are
// convert_q8_0_flipped rows, those plus the quants flipped to x + 128.
//
// * Q8_0, llama order (the default): Q8_0LlamaLanes<VnniLaneDot>
//   (q8_0_llama_lanes.h), llama.cpp's 8-lane order per (weight row, activation
//   row) pair with the weight rows in the lanes (stop 47; before, the plain
//   AVX2 tiles of q8_0_llama_tiles.h with one vpdpbusd per pair and block).
// * Q4_0, and Q5_0 / Q8_0 in the lanes order: RowsInLanes, weight rows in the int32
//   lanes, each block's exact sum, then acc = fma(float(isum), d_w * d_x, acc)
//   (float(isum) by the biased start and a vsubps, as Q8_0LlamaLanes does: stop 47, 0.95-0.98 of the time)
//   (llama.cpp's repacked-Q4_0 order; for Q5_0 / Q8_0 the AVX2 and AVX-512
//   lanes kernels', the same bits). Slices of 16 weight rows repacked per call into the thread's
//   scratch: per block the 16 rows' scales as f32, then the unsigned quants
//   grouped by 4 elements, [group 0..7][row 0..15][4 bytes]; one vpdpbusd
//   multiplies 8 rows' 4 quants by one activation row's 4 quants broadcast.
//   Tiles of 16 rows x 3 activation rows (6 int32 and 6 float accumulators).
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/q8_0_llama_lanes.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2vnni {
namespace {

constexpr int64_t kSmallBatch = 16;  // Q8_0 batches up to this size: the plain AVX2 small-batch kernel
constexpr int64_t kQ4_0SmallBatch = 8;

__m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }

struct Q4_0Weights {
  static constexpr int kBytes = kQ4_0Bytes;
  static constexpr int kOffset = 8;
  // The block's 32 quants as unsigned bytes in element order (low nibbles: 0-15, high: 16-31).
  static __m256i quants(const uint8_t* blk) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
  }
};

struct Q5_0Weights {
  static constexpr int kBytes = 22;
  static constexpr int kOffset = 16;
  static __m256i quants(const uint8_t* blk) { return q5_0_quants(blk); }
};

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0Bytes;
  static constexpr int kOffset = 128;
  static __m256i quants(const uint8_t* blk) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(char(0x80)));
  }
};

// Q8_0 prompts in llama.cpp's order with the weight rows in the lanes (stop 47; q8_0_llama_lanes.h): the
// activation's 8 quants of groups 2m, 2m+1, flipped to x + 128 (convert_q8_0_flipped) and broadcast, meet the 4 rows'
// signed weights in one vpdpbusd from the weights' lane starts kFloatBias - 128 * (the group's 4 weights' sum, made by
// the repack). Per (4 pairs, 2 groups) then: vpdpbusd, vsubps and FMA, and two loads (the broadcast, half the weights
// and starts). The one-pair-a-vector tiles (q8_0_llama_tiles.h, with vpdpbusd) spent a scale spread and shares of the
// weights' flip and the products besides. On an Intel Xeon (AVX-VNNI) this kernel with the convert took 0.83-0.90 of
// their time in one-thread pp512 (0.84-0.97 in bench_matmul_kernels), the biased lanes 0.81 of that
// (docs/perf/cpu-round2g.md "Stop 47"). Tried: 4 x 3 tiles with the activation's lane starts broadcast per (row, m),
// load-bound (three loads per vpdpbusd): 0.93 of this form's speed; 4 x 2 with those starts, 0.96.
struct VnniLaneDot {
  static constexpr int kActBlockBytes = 32;
  static __m256i companion(__m256i v) {
    return _mm256_sub_epi32(_mm256_set1_epi32(kFloatBias),
                            dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(char(0x80)), v));
  }
  static const uint8_t* act_quants(const GemmArgs& g, const uint8_t* row) {
    return row + avx2::q8_0_sums_row_bytes(g.k);
  }
  static __m256i lanes(__m256i w, __m256i starts, __m256i x8) { return dpbusd(starts, x8, w); }
  static void check(const GemmArgs& g) {
    if (g.act_row_bytes < q8_0_flipped_row_bytes(g.k))
      fail("Q8_0 prompt gemm: activation rows of {} bytes, not convert_q8_0_flipped's {} (k = {})", g.act_row_bytes,
           q8_0_flipped_row_bytes(g.k), g.k);
  }
};

template <class W>
struct RowsInLanes {
  static constexpr int kSlice = 16;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants
  static constexpr int kActs = 3;

  // rows (1 to 16) weight rows from row into packed, zero rows after them (Q5_0 on its row groups: whole
  // groups, gemm_q5_0_packed_batch).
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    if (std::is_same_v<W, Q5_0Weights> && g.layout == kLayoutQ5Groups8)
      return avx2::q5_0_groups_to_lanes(g, row, rows, kSlice, kBlockBytes, packed);
    const int64_t nb = g.k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* scales = reinterpret_cast<float*>(pb);
      alignas(32) uint32_t tmp[kSlice][8];  // a row's 32 quants as 8 groups of 4
      for (int r = 0; r < kSlice; ++r) {
        if (r >= rows) {
          scales[r] = 0.0f;
          std::memset(tmp[r], 0, sizeof tmp[r]);
          continue;
        }
        const BlockAt at = legacy_block(g, row + r, b, W::kBytes);  // Q5_0 here: plain
        scales[r] = load_f16(at.scale);
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[r]), W::quants(at.quants - 2));  // quants() reads blk + 2 on
      }
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kSlice * 4);
      for (int grp = 0; grp < 8; ++grp)
        for (int r = 0; r < kSlice; ++r) q[grp * kSlice + r] = tmp[r][grp];
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out16[]) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    const uint64_t scales_at = uint64_t(nb) * kQ8_0Bytes, sums_at = scales_at + uint64_t(nb) * 4;
    const __m256 bias_f32 = _mm256_castsi256_ps(_mm256_set1_epi32(kFloatBias));
    __m256 facc[2][RA];
    for (int v = 0; v < 2; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const uint8_t* pq = pb + kSlice * 4;
      __m256i iacc[2][RA];
      for (int a = 0; a < RA; ++a) {
        int32_t sum;
        std::memcpy(&sum, x[a] + sums_at + 4 * b, 4);
        // The block's exact sum starts at -offset * sum(x), biased by kFloatBias: its bits are then
        // the float 1.5 * 2^23 + sum (|sum| <= 32 * 128 * 127 < 2^22), one vsubps from float(sum) exactly.
        iacc[0][a] = iacc[1][a] = _mm256_set1_epi32(kFloatBias - W::kOffset * sum);
      }
      for (int grp = 0; grp < 8; ++grp) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + grp * kSlice * 4));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + grp * kSlice * 4 + 32));
        for (int a = 0; a < RA; ++a) {
          int32_t four;
          std::memcpy(&four, x[a] + b * kQ8_0Bytes + 2 + 4 * grp, 4);
          const __m256i xb = _mm256_set1_epi32(four);
          iacc[0][a] = dpbusd(iacc[0][a], w0, xb);
          iacc[1][a] = dpbusd(iacc[1][a], w1, xb);
        }
      }
      const __m256 wd0 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb));
      const __m256 wd1 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb) + 8);
      for (int a = 0; a < RA; ++a) {
        float xd;
        std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
        const __m256 xdv = _mm256_set1_ps(xd);
        const __m256 sum0 = _mm256_sub_ps(_mm256_castsi256_ps(iacc[0][a]), bias_f32);
        const __m256 sum1 = _mm256_sub_ps(_mm256_castsi256_ps(iacc[1][a]), bias_f32);
        facc[0][a] = _mm256_fmadd_ps(sum0, _mm256_mul_ps(wd0, xdv), facc[0][a]);
        facc[1][a] = _mm256_fmadd_ps(sum1, _mm256_mul_ps(wd1, xdv), facc[1][a]);
      }
    }
    for (int a = 0; a < RA; ++a) {
      _mm256_storeu_ps(out16[a], facc[0][a]);
      _mm256_storeu_ps(out16[a] + 8, facc[1][a]);
    }
  }
};

}  // namespace

int64_t scratch_floats(int64_t k) { return k / 32 * RowsInLanes<Q8_0Weights>::kBlockBytes / 4 + 8; }
static_assert(Q8_0LlamaLanes<VnniLaneDot>::kBlockBytes <= RowsInLanes<Q8_0Weights>::kBlockBytes,
              "scratch_floats holds a slice");

uint64_t q8_0_flipped_row_bytes(int64_t k) { return avx2::q8_0_sums_row_bytes(k) + uint64_t(k / 32) * 32; }

void convert_q8_0_flipped(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  avx2::convert_q8_0_sums(act_type, x, dst, k);
  uint8_t* flipped = dst + avx2::q8_0_sums_row_bytes(k);
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + b * kQ8_0Bytes + 2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(flipped + b * 32),
                        _mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))));
  }
}

// Q4_0: decode and batches of up to 8 rows on the plain AVX2 kernel, larger
// batches in the lanes (on the row groups: gemm_q4_0_packed_batch, the same kernel); both in the block-exact order, so
// the split never changes a result.
void gemm_q4_0(const GemmArgs& g) {
  if (g.n_act > kQ4_0SmallBatch && g.scratch != nullptr) SliceDriver<RowsInLanes<Q4_0Weights>>::run(g);
  else avx2::gemm_q4_0(g);
}

// Q5_0: the block-exact order (avx2::q5_0_block_exact: the lanes order at every
// batch size, stop 25) in the lanes; the rest on the plain AVX2 kernels
// (llama.cpp's order there).
// Decode and batches of up to kQ5_0DecodeActs rows take avx2's plain decode in
// either order (its rows8_exact gives these lanes' bits without a per-call repack).
constexpr int64_t kQ5_0DecodeActs = 3;  // legacy_avx2.cpp kSmallBatch
void gemm_q5_0(const GemmArgs& g) {
  if (avx2::q5_0_block_exact(g) && g.n_act > kQ5_0DecodeActs) SliceDriver<RowsInLanes<Q5_0Weights>>::run(g);
  else avx2::gemm_q5_0(g);
}

// Q8_0: decode, small batches and expert rows on the plain AVX2 kernels (the
// llama order); larger batches in the selected order (batch_order()). Without a
// scratch (no caller of the graph's) the plain AVX2 tiles, the same bits.
void gemm_q8_0(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || g.single_rows || g.scratch == nullptr) avx2::gemm_q8_0(g);
  else if (lanes_order(DType::Q8_0)) SliceDriver<RowsInLanes<Q8_0Weights>>::run(g);
  else Q8_0LlamaLanes<VnniLaneDot>::run(g);
}

bool gemm_q5_0_packed_batch(const GemmArgs& g) {
  if (!avx2::q5_0_block_exact(g)) return false;
  q5_0_on_whole_groups(g, SliceDriver<RowsInLanes<Q5_0Weights>>::run, gemm_q5_0);
  return true;
}

bool gemm_q4_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kQ4_0SmallBatch || g.scratch == nullptr) return false;
  if (g.row_begin % 8 != 0)
    fail("Q4_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
  SliceDriver<RowsInLanes<Q4_0Weights>>::run(g);
  return true;
}

bool gemm_q8_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || g.single_rows || lanes_order(DType::Q8_0)) return false;
  if (g.scratch == nullptr) return avx2::gemm_q8_0_packed_batch(g);
  Q8_0LlamaLanes<VnniLaneDot>::run(g);
  return true;
}

}  // namespace opal::cpu::avx2vnni
#endif  // x86
