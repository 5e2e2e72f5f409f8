// Q4_0, Q5_0, Q8_0 x Q8_0 and Q4_K, Q6_K x Q8_K with NEON sdot (vdotq_s32:
// 4 groups of 4 signed byte products per 32-bit lane, exact).
//   Q4_0 / Q5_0 / Q8_0: per 32-element block, two sdot into an int32x4,
//     converted to float and multiplied by d_w * d_x into a float accumulator
//     per pair. Q4_0 / Q5_0 quants are made signed (q - 8, q - 16) before the dot.
//   Q4_K: per 32-element sub-block s, an sdot sum times the sub-block scale
//     (vmlaq_n_s32) into one int32x4 per super-block; the mins use the
//     activation's bsums: - dmin * d_x * sum_s m_s * (bsum_2s + bsum_2s+1).
// Tiles: 2 weight rows x 2 activation rows for prompts, 4 x 1 for decode.
//   Q6_K: sub-blocks of 16 scaled in int32 per super-block (see Q6KKernel).
// Q4_0 batches of 4 rows or more, and Q5_0 / Q8_0 batches of more than 16 in
// the lanes order (batch_order()), take RowsInLanes: weight rows in the int32
// lanes, each block's exact sum, then one FMA (see there).
#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstring>

#include "backends/cpu/kernels/arm_neon/kernels_neon.h"
#include "backends/cpu/kernels/kquant_scales.h"
#include "backends/cpu/kernels/rows_in_lanes.h"
#include "backends/cpu/kernels/tile_driver.h"

namespace opal::cpu::neon {
namespace {

struct Q4_0Weights {
  static constexpr int kBytes = kQ4_0Bytes;
  static void load(const uint8_t* blk, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t v = vld1q_u8(blk + 2);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
  }
};

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0Bytes;
  static void load(const uint8_t* blk, int8x16_t* lo, int8x16_t* hi) {
    *lo = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2));
    *hi = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 18));
  }
};

// Q5_0: d f16 | qh (32 fifth bits, bit j for element j) | qs[16] nibbles;
// q = (nibble | fifth bit << 4) - 16. The fifth bits of 16 elements are
// spread to bytes by a per-byte bit test.
struct Q5_0Weights {
  static constexpr int kBytes = kQ5_0Bytes;
  static uint8x16_t fifth_bits(uint8_t b0, uint8_t b1) {
    static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bytes = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
    return vandq_u8(vtstq_u8(bytes, vld1q_u8(kBit)), vdupq_n_u8(0x10));
  }
  static void load(const uint8_t* blk, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t v = vld1q_u8(blk + 6);
    const uint8x16_t l = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), fifth_bits(blk[2], blk[3]));
    const uint8x16_t h = vorrq_u8(vshrq_n_u8(v, 4), fifth_bits(blk[4], blk[5]));
    *lo = vsubq_s8(vreinterpretq_s8_u8(l), vdupq_n_s8(16));
    *hi = vsubq_s8(vreinterpretq_s8_u8(h), vdupq_n_s8(16));
  }
};

template <class W>
struct LegacyKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 32;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    float32x4_t acc[RW][RA];
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) acc[i][a] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      int8x16_t x0[RA], x1[RA];
      float xd[RA];
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_0Bytes;
        x0[a] = vld1q_s8(reinterpret_cast<const int8_t*>(xb + 2));
        x1[a] = vld1q_s8(reinterpret_cast<const int8_t*>(xb + 18));
        xd[a] = load_f16(xb);
      }
      for (int i = 0; i < RW; ++i) {
        const uint8_t* wb = w[i] + b * W::kBytes;
        int8x16_t lo, hi;
        W::load(wb, &lo, &hi);
        const float wd = load_f16(wb);
        for (int a = 0; a < RA; ++a) {
          const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0[a]), hi, x1[a]);
          acc[i][a] = vmlaq_n_f32(acc[i][a], vcvtq_f32_s32(s), wd * xd[a]);
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = vaddvq_f32(acc[i][a]);
  }
};

struct Q4KKernel {
  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 256;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    float sum[RW][RA] = {};
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t sc[RW][8], mn[RW][8];
      for (int i = 0; i < RW; ++i) unpack_q4k_scales(w[i] + b * kQ4_KBytes + kQ4_KScales, sc[i], mn[i]);
      int32x4_t isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = vdupq_n_s32(0);
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < RW; ++i) {
          const uint8_t* qs = w[i] + b * kQ4_KBytes + kQ4_KQs + 32 * j;
          const uint8x16_t v0 = vld1q_u8(qs), v1 = vld1q_u8(qs + 16);
          const int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(v0, vdupq_n_u8(0x0F)));
          const int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(v1, vdupq_n_u8(0x0F)));
          const int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), h1 = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
          for (int a = 0; a < RA; ++a) {
            const int8_t* xq = reinterpret_cast<const int8_t*>(x[a] + b * kQ8_KBytes + kQ8_KQs + 64 * j);
            const int32x4_t slo = vdotq_s32(vdotq_s32(vdupq_n_s32(0), l0, vld1q_s8(xq)), l1, vld1q_s8(xq + 16));
            const int32x4_t shi = vdotq_s32(vdotq_s32(vdupq_n_s32(0), h0, vld1q_s8(xq + 32)), h1, vld1q_s8(xq + 48));
            isum[i][a] = vmlaq_n_s32(vmlaq_n_s32(isum[i][a], slo, sc[i][2 * j]), shi, sc[i][2 * j + 1]);
          }
        }
      for (int a = 0; a < RA; ++a) {
        const uint8_t* xb = x[a] + b * kQ8_KBytes;
        const float xd = load_f32(xb);
        const int16x8_t bs0 = vld1q_s16(reinterpret_cast<const int16_t*>(xb + kQ8_KBsums));
        const int16x8_t bs1 = vld1q_s16(reinterpret_cast<const int16_t*>(xb + kQ8_KBsums + 16));
        const int16x8_t bs32 = vpaddq_s16(bs0, bs1);  // sums of 32 quants, per sub-block
        for (int i = 0; i < RW; ++i) {
          const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn[i])));
          const int32x4_t mm =
              vmlal_s16(vmull_s16(vget_low_s16(bs32), vget_low_s16(m)), vget_high_s16(bs32), vget_high_s16(m));
          const uint8_t* wb = w[i] + b * kQ4_KBytes;
          sum[i][a] +=
              load_f16(wb) * xd * float(vaddvq_s32(isum[i][a])) - load_f16(wb + 2) * xd * float(vaddvq_s32(mm));
        }
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = sum[i][a];
  }
};

// Q6_K x Q8_K: per super-block (ql[128] | qh[64] | scales[16] i8 | d f16)
// and half n of 128 elements, the 8 vectors of 16 quants q = (4 bits of ql |
// 2 bits of qh << 4) - 32 (signed, as sdot wants), one sdot per 16-element
// sub-block s against the activation's 16 quants, times the sub-block scale
// (vmlaq_n_s32) into one int32x4 per super-block (exact: |q| <= 32, |x| <= 127,
// |sc| <= 128), then sum += d_w * d_x * float(the 4 lanes' sum). Element
// 128n + 32m + l (m = 0..3, l = 0..31) takes ql[64n + l + 32 (m & 1)]'s low
// (m < 2) or high nibble and bits 2m, 2m+1 of qh[32n + l].
struct Q6KKernel {
  static void quants(const uint8_t* ql, const uint8_t* qh, int8x16_t q[8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
    const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
    const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
    const uint8x16_t u[8] = {
        vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(h0, 4), m2)),
        vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(h1, 4), m2)),
        vorrq_u8(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8(h0, 2), m2)),
        vorrq_u8(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8(h1, 2), m2)),
        vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m2)),
        vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m2)),
        vorrq_u8(vshrq_n_u8(l2, 4), vandq_u8(vshrq_n_u8(h0, 2), m2)),
        vorrq_u8(vshrq_n_u8(l3, 4), vandq_u8(vshrq_n_u8(h1, 2), m2)),
    };
    for (int j = 0; j < 8; ++j) q[j] = vsubq_s8(vreinterpretq_s8_u8(u[j]), vdupq_n_s8(32));
  }

  template <int RW, int RA>
  static void tile(const GemmArgs& g, int64_t row, int64_t act) {
    const int64_t nb = g.k / 256;
    const uint8_t* w[RW];
    const uint8_t* x[RA];
    for (int i = 0; i < RW; ++i) w[i] = g.w + uint64_t(row + i) * g.w_row_bytes;
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    float sum[RW][RA] = {};
    for (int64_t b = 0; b < nb; ++b) {
      int32x4_t isum[RW][RA];
      for (int i = 0; i < RW; ++i)
        for (int a = 0; a < RA; ++a) isum[i][a] = vdupq_n_s32(0);
      for (int n = 0; n < 2; ++n)
        for (int i = 0; i < RW; ++i) {
          const uint8_t* wb = w[i] + b * kQ6_KBytes;
          const int8_t* sc = reinterpret_cast<const int8_t*>(wb + kQ6_KScales) + 8 * n;
          int8x16_t q[8];
          quants(wb + 64 * n, wb + kQ6_KQh + 32 * n, q);
          for (int a = 0; a < RA; ++a) {
            const int8_t* xq = reinterpret_cast<const int8_t*>(x[a] + b * kQ8_KBytes + kQ8_KQs + 128 * n);
            for (int j = 0; j < 8; ++j)
              isum[i][a] = vmlaq_n_s32(isum[i][a], vdotq_s32(vdupq_n_s32(0), q[j], vld1q_s8(xq + 16 * j)), sc[j]);
          }
        }
      for (int a = 0; a < RA; ++a) {
        const float xd = load_f32(x[a] + b * kQ8_KBytes);
        for (int i = 0; i < RW; ++i)
          sum[i][a] += load_f16(w[i] + b * kQ6_KBytes + kQ6_KD) * xd * float(vaddvq_s32(isum[i][a]));
      }
    }
    for (int i = 0; i < RW; ++i)
      for (int a = 0; a < RA; ++a) g.out[(act + a) * g.out_stride + row + i] = sum[i][a];
  }
};

// Batches with weight rows in the int32 lanes (the x86 rows-in-lanes kernels'
// order): each slice of 8 weight rows is repacked once per call into the
// thread's scratch, per block: the 8 rows' scales as f32, then the signed
// quants (Q4_0: q - 8) grouped by 4 elements, [group 0..7][row 0..7][4 bytes].
// sdot of a group vector (4 rows' 4 quants) with one activation row's 4
// quants (broadcast) adds the 4 rows' exact group sums into int32 lanes; the
// block's 8 groups give its exact int32 sum, then acc = fma(float(isum), d_w *
// d_x, acc) per block: llama_order::block_exact, the scalar reference's Q4_0
// order (the same bits) and the lanes order of Q8_0 (the x86 lanes kernels'
// bits). Tiles of 8 rows x 4 activation rows (8 int32 and 8 float
// accumulators, the activation blocks in 8 registers).
template <class W>
struct RowsInLanes {
  static constexpr int kSlice = 8, kActs = 4;
  static constexpr int kBlockBytes = kSlice * 4 + 8 * kSlice * 4;  // scales + quants

  static void repack(const GemmArgs& g, int64_t row, int rows, uint8_t* packed) {
    const int64_t nb = g.k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pb = packed + b * kBlockBytes;
      float* scales = reinterpret_cast<float*>(pb);
      uint32_t* q = reinterpret_cast<uint32_t*>(pb + kSlice * 4);
      for (int r = 0; r < kSlice; ++r) {
        uint32_t tmp[8] = {};  // the row's 32 signed quants as 8 groups of 4
        scales[r] = 0.0f;
        if (r < rows) {
          const uint8_t* blk = g.w + uint64_t(row + r) * g.w_row_bytes + uint64_t(b) * W::kBytes;
          int8x16_t lo, hi;
          W::load(blk, &lo, &hi);
          vst1q_u32(tmp, vreinterpretq_u32_s8(lo));
          vst1q_u32(tmp + 4, vreinterpretq_u32_s8(hi));
          scales[r] = load_f16(blk);
        }
        for (int grp = 0; grp < 8; ++grp) q[grp * kSlice + r] = tmp[grp];
      }
    }
  }

  template <int RA>
  static void tile(const GemmArgs& g, const uint8_t* packed, int64_t act, float* out8[]) {
    const int64_t nb = g.k / 32;
    const uint8_t* x[RA];
    for (int a = 0; a < RA; ++a) x[a] = g.act + uint64_t(act + a) * g.act_row_bytes;
    float32x4_t facc[2][RA];
    for (int v = 0; v < 2; ++v)
      for (int a = 0; a < RA; ++a) facc[v][a] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = packed + b * kBlockBytes;
      const int8_t* pq = reinterpret_cast<const int8_t*>(pb + kSlice * 4);
      int32x4_t isum[2][RA];
      for (int v = 0; v < 2; ++v)
        for (int a = 0; a < RA; ++a) isum[v][a] = vdupq_n_s32(0);
      for (int grp = 0; grp < 8; ++grp) {
        const int8x16_t w0 = vld1q_s8(pq + grp * kSlice * 4), w1 = vld1q_s8(pq + grp * kSlice * 4 + 16);
        for (int a = 0; a < RA; ++a) {
          int32_t four;
          std::memcpy(&four, x[a] + b * kQ8_0Bytes + 2 + 4 * grp, 4);
          const int8x16_t xb = vreinterpretq_s8_s32(vdupq_n_s32(four));
          isum[0][a] = vdotq_s32(isum[0][a], w0, xb);
          isum[1][a] = vdotq_s32(isum[1][a], w1, xb);
        }
      }
      const float* wd = reinterpret_cast<const float*>(pb);
      const float32x4_t wd0 = vld1q_f32(wd), wd1 = vld1q_f32(wd + 4);
      for (int a = 0; a < RA; ++a) {
        const float xd = load_f16(x[a] + b * kQ8_0Bytes);
        facc[0][a] = vfmaq_f32(facc[0][a], vcvtq_f32_s32(isum[0][a]), vmulq_n_f32(wd0, xd));
        facc[1][a] = vfmaq_f32(facc[1][a], vcvtq_f32_s32(isum[1][a]), vmulq_n_f32(wd1, xd));
      }
    }
    for (int a = 0; a < RA; ++a) {
      vst1q_f32(out8[a], facc[0][a]);
      vst1q_f32(out8[a] + 4, facc[1][a]);
    }
  }
};

constexpr int64_t kQ4_0LanesFrom = 4, kQ8_0LanesFrom = 17;

}  // namespace

int64_t legacy_scratch_floats(int64_t k) { return k / 32 * RowsInLanes<Q8_0Weights>::kBlockBytes / 4 + 8; }

// Q4_0: batches in the lanes (the reference's order); decode and batches of
// up to 3 rows keep the 2 x 2 tiles.
void gemm_q4_0(const GemmArgs& g) {
  if (g.n_act >= kQ4_0LanesFrom && g.scratch != nullptr) SliceDriver<RowsInLanes<Q4_0Weights>>::run(g);
  else gemm_entry<LegacyKernel<Q4_0Weights>, 2, 2, 4>(g);
}
// Q5_0: batches of more than 16 rows in the lanes when the batch order
// gives Q5_0 the lanes (the default), else the 2 x 2 tiles.
void gemm_q5_0(const GemmArgs& g) {
  if (g.n_act >= kQ8_0LanesFrom && !g.single_rows && g.scratch != nullptr && lanes_order(DType::Q5_0))
    SliceDriver<RowsInLanes<Q5_0Weights>>::run(g);
  else gemm_entry<LegacyKernel<Q5_0Weights>, 2, 2, 4>(g);
}
// Q8_0: the lanes only for batches of more than 16 rows in the lanes order.
void gemm_q8_0(const GemmArgs& g) {
  if (g.n_act >= kQ8_0LanesFrom && !g.single_rows && g.scratch != nullptr && lanes_order(DType::Q8_0))
    SliceDriver<RowsInLanes<Q8_0Weights>>::run(g);
  else gemm_entry<LegacyKernel<Q8_0Weights>, 2, 2, 4>(g);
}
void gemm_q4_K(const GemmArgs& g) { gemm_entry<Q4KKernel, 2, 2, 2>(g); }
void gemm_q6_K(const GemmArgs& g) { gemm_entry<Q6KKernel, 2, 2, 2>(g); }

}  // namespace opal::cpu::neon
#endif  // __aarch64__
