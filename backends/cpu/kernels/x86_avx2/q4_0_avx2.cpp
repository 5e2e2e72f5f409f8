// Q4_0 weights x Q8_0 activations with AVX2, in llama.cpp's repacked-Q4_0
// order at every batch size: each block's exact int32 sum, then
// acc = fma(float(isum), d_w * d_x, acc) (kernels/llama_order.h block_exact),
// so every path here gives the scalar reference's bits.
//
// Activation rows are convert_q8_0_sums rows: the Q8_0 blocks, then each
// block's d as f32, then each block's sum of quants as int32. The nibbles q
// in [0, 15] stand for q - 8, so a block's sum is sum(q * x) - 8 * sum(x);
// the second term comes from the row's tail.
//
// u8 x s8 products: vpmaddubsw gives int16 pair sums q0*x0 + q1*x1, at most
// 2 * 15 * 127 = 3810 in magnitude, so up to 8 of them add in int16 without
// saturation (30480); one vpmaddwd by ones then gives int32.
//
// Decode (Q4_0Decode, one activation row; small batches row by row): 8 weight
// rows per step, rows j and j + 4 in the two 128-bit lanes of vector j (16
// nibble bytes each). The low nibbles (elements 0-15) meet the activation's
// first 16 bytes broadcast to both lanes, the high nibbles its last 16; two
// unpack-add rounds give the 8 rows' block sums in one vector in row order.
// The rows 16 on (two steps) are prefetched as one contiguous span, a share
// of its lines per block.
//
// Batches (RowsInLanes, 4 activation rows or more): weight rows in the int32
// lanes. Each slice of 16 weight rows is repacked once per call into the
// thread's scratch: per block, the 16 rows' scales as f32, then the quants
// grouped by 4 elements, [group 0..7][row 0..15][4 bytes], so one vector
// holds 8 rows' 4 elements of a group and one vpmaddubsw multiplies them by
// one activation row's 4 elements (broadcast). The 8 groups add in int16, one
// vpmaddwd makes the 8 rows' exact block sums, and one convert and FMA serve
// 8 (row, activation) pairs; the float accumulators are the output's layout.
#if defined(__x86_64__) || defined(__i386__)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/x86_avx2/kernels_avx2.h"
#include "backends/cpu/kernels/x86_avx2/simd_avx2.h"
#include "core/error.h"

namespace opal::cpu::avx2 {
namespace {

constexpr int64_t kRowsInLanesMinActs = 4;
// Batches up to this size run the decode kernel row by row (each weight step
// streamed once and met by every activation row from L1).
constexpr int64_t kSmallBatch = 8;

__m256i load8(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// Four activation bytes in every int32 lane.
__m256i bcast4(const uint8_t* p) {
  int32_t four;
  std::memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}
short f16_bits(const uint8_t* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}

struct ActTail {
  const uint8_t* scales;  // f32 per block
  const uint8_t* sums;    // int32 per block
  explicit ActTail(const uint8_t* row, int64_t nb)
      : scales(row + nb * kQ8_0Bytes), sums(row + nb * kQ8_0Bytes + nb * 4) {}
  float d(int64_t b) const {
    float v;
    std::memcpy(&v, scales + 4 * b, 4);
    return v;
  }
  int32_t sum(int64_t b) const {
    int32_t v;
    std::memcpy(&v, sums + 4 * b, 4);
    return v;
  }
};

struct Q4_0Decode {
  // One row, block by block (the remainder rows).
  static void row1(const GemmArgs& g, const uint8_t* x, float* out, int64_t row) {
    const int64_t nb = g.k / 32;
    const ActTail tail(x, nb);
    const uint8_t* w = g.w + uint64_t(row) * g.w_row_bytes;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* wb = w + b * kQ4_0Bytes;
      const uint8_t* xb = x + b * kQ8_0Bytes;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2));
      const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
      const int32_t sum = hsum8_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), ones16())) - 8 * tail.sum(b);
      acc = std::fma(float(sum), load_f16(wb) * load_f16(xb), acc);
    }
    out[row] = acc;
  }

  static void rows8(const GemmArgs& g, const uint8_t* x, float* out, int64_t row, bool prefetch) {
    const int64_t nb = g.k / 32;
    const ActTail tail(x, nb);
    const uint64_t rb = g.w_row_bytes;
    const uint8_t* lo = g.w + uint64_t(row) * rb;  // rows 0-3
    const uint8_t* hi = lo + 4 * rb;               // rows 4-7
    const uint64_t rbs[4] = {0, rb, 2 * rb, 3 * rb};
    const uint8_t* next = lo + 16 * rb;
    const int lines_per_step = int((8 * rb + 64 * nb - 1) / (64 * nb));
    const bool to_l2 = 16 * rb > 32 * 1024;  // two steps of long rows do not fit L1
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* xb = x + b * kQ8_0Bytes;
      const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 2)));
      const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 18)));
      const uint64_t off = uint64_t(b) * kQ4_0Bytes;
      for (int l = 0; prefetch && l < lines_per_step; ++l) {
        const char* p = reinterpret_cast<const char*>(next + (b * lines_per_step + l) * 64);
        if (to_l2) _mm_prefetch(p, _MM_HINT_T1);
        else _mm_prefetch(p, _MM_HINT_T0);
      }
      __m256i v[4];
      for (int j = 0; j < 4; ++j)
        v[j] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(hi + off + rbs[j] + 2),
                                   reinterpret_cast<const __m128i*>(lo + off + rbs[j] + 2));
      __m256i u = q4_0_block_sums8(v, xlo, xhi);
      u = _mm256_sub_epi32(u, _mm256_set1_epi32(8 * tail.sum(b)));
      const uint8_t* d0 = lo + off;
      const uint8_t* d1 = hi + off;
      const __m128i h =
          _mm_setr_epi16(f16_bits(d0), f16_bits(d0 + rbs[1]), f16_bits(d0 + rbs[2]), f16_bits(d0 + rbs[3]),
                         f16_bits(d1), f16_bits(d1 + rbs[1]), f16_bits(d1 + rbs[2]), f16_bits(d1 + rbs[3]));
      const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(load_f16(xb)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), d, acc);
    }
    _mm256_storeu_ps(out + row, acc);
  }

  // Small batches: each step of 8 rows meets every activation row in turn
  // while it is in L1 (fetched once, by the first row's prefetches).
  static void run(const GemmArgs& g) {
    int64_t r = g.row_begin;
    // The first rows have no earlier step to prefetch them: request them at once.
    const uint8_t* first = g.w + uint64_t(r) * g.w_row_bytes;
    const uint64_t head = std::min<uint64_t>(uint64_t(g.row_end - r), 16) * g.w_row_bytes;
    for (uint64_t o = 0; o < head; o += 64) _mm_prefetch(reinterpret_cast<const char*>(first + o), _MM_HINT_T0);
    auto x = [&](int64_t a) { return g.act + uint64_t(a) * g.act_row_bytes; };
    for (; r + 8 <= g.row_end; r += 8)
      for (int64_t a = 0; a < g.n_act; ++a) rows8(g, x(a), g.out + a * g.out_stride, r, a == 0);
    for (; r < g.row_end; ++r)
      for (int64_t a = 0; a < g.n_act; ++a) row1(g, x(a), g.out + a * g.out_stride, r);
  }
};

struct RowsInLanes {
  static constexpr int kSlice = 16;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants
  static constexpr int kActs = 4;

  static bool applies(const GemmArgs& g) { return g.n_act >= kRowsInLanesMinActs && g.scratch != nullptr; }

  // rows (1 to 16) weight rows from row into packed, zero rows after them.
  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    const __m128i low4 = _mm_set1_epi8(0x0F);
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
        const BlockAt at = legacy_block(g, row + r, b, kQ4_0Bytes);
        scales[r] = load_f16(at.scale);
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at.quants));
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp[r]), _mm_and_si128(v, low4));
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp[r] + 4), _mm_and_si128(_mm_srli_epi16(v, 4), low4));
      }
      // Transpose 16 rows x 8 groups of 4 bytes to [group][row].
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
    // The float accumulators live in the output (updated once per block), so
    // the registers hold the 2 x RA int16 sums, the two weight vectors of a
    // group and the broadcast: each weight vector is loaded once per group.
    for (int a = 0; a < RA; ++a) std::memset(out16[a], 0, sizeof(float) * kSlice);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const uint8_t* pq = pb + kSlice * 4;
      const uint8_t* xq[RA];
      for (int a = 0; a < RA; ++a) xq[a] = x[a] + b * kQ8_0Bytes + 2;
      __m256i iacc[2][RA];
      {
        const __m256i w0 = load8(pq), w1 = load8(pq + 32);
        for (int a = 0; a < RA; ++a) {  // group 0 starts the int16 sums
          const __m256i xb = bcast4(xq[a]);
          iacc[0][a] = _mm256_maddubs_epi16(w0, xb);
          iacc[1][a] = _mm256_maddubs_epi16(w1, xb);
        }
      }
      for (int grp = 1; grp < 8; ++grp) {
        const __m256i w0 = load8(pq + grp * kSlice * 4);
        const __m256i w1 = load8(pq + grp * kSlice * 4 + 32);
        for (int a = 0; a < RA; ++a) {
          const __m256i xb = bcast4(xq[a] + 4 * grp);
          iacc[0][a] = in_register(_mm256_add_epi16(iacc[0][a], _mm256_maddubs_epi16(w0, xb)));
          iacc[1][a] = in_register(_mm256_add_epi16(iacc[1][a], _mm256_maddubs_epi16(w1, xb)));
        }
      }
      const __m256 wd0 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb));
      const __m256 wd1 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb) + 8);
      for (int a = 0; a < RA; ++a) {
        float xd;
        std::memcpy(&xd, x[a] + scales_at + 4 * b, 4);
        // 8 * sum(x) from a broadcast load and a shift (no scalar-to-vector move).
        const __m256i off = _mm256_slli_epi32(bcast4(x[a] + sums_at + 4 * b), 3);
        const __m256 xdv = _mm256_set1_ps(xd);
        const __m256i s0 = _mm256_sub_epi32(_mm256_madd_epi16(iacc[0][a], ones16()), off);
        const __m256i s1 = _mm256_sub_epi32(_mm256_madd_epi16(iacc[1][a], ones16()), off);
        _mm256_storeu_ps(out16[a],
                         _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(wd0, xdv), _mm256_loadu_ps(out16[a])));
        _mm256_storeu_ps(out16[a] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(wd1, xdv),
                                                       _mm256_loadu_ps(out16[a] + 8)));
      }
    }
  }
};

}  // namespace

void convert_q8_0_sums(DType act_type, const float* x, uint8_t* dst, int64_t k) {
  convert_q8_0(act_type, x, dst, k);
  const int64_t nb = k / 32;
  uint8_t* tail = dst + nb * kQ8_0Bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = dst + b * kQ8_0Bytes;
    const float d = load_f16(blk);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    // sum of the signed bytes: pairs with ones (u8 ones x s8 quants), then pairs of pairs.
    const int32_t sum = hsum8_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), ones16()));
    std::memcpy(tail + 4 * b, &d, 4);
    std::memcpy(tail + 4 * (nb + b), &sum, 4);
  }
}

uint64_t q8_0_sums_row_bytes(int64_t k) { return uint64_t(k / 32) * (kQ8_0Bytes + 8); }
int64_t q4_0_scratch_floats(int64_t k) { return k / 32 * RowsInLanes::kBlockBytes / 4 + 8; }

// Decode and batches of up to 3 rows row by row, larger batches RowsInLanes;
// both in the block-exact order, so the split never changes a result.
void gemm_q4_0(const GemmArgs& g) {
  if (g.n_act > kSmallBatch && RowsInLanes::applies(g)) SliceDriver<RowsInLanes>::run(g);
  else Q4_0Decode::run(g);
}

// Prompt batches on the row groups: RowsInLanes's repack reads them in place (legacy_block).
bool gemm_q4_0_packed_batch(const GemmArgs& g) {
  if (g.n_act <= kSmallBatch || !RowsInLanes::applies(g)) return false;
  if (g.row_begin % 8 != 0)
    fail("Q4_0 row-group prompt gemm: slice starts at row {}, not a group boundary", g.row_begin);
  SliceDriver<RowsInLanes>::run(g);
  return true;
}

}  // namespace opal::cpu::avx2
#endif  // x86
