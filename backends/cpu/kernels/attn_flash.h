// Kernels of the tiled (flash-style) attention (ops/attention_flash.cpp), per
// ISA (the dispatch of isa.h; the scalar forms in ref/attn_flash_ref.cpp are
// the definition, the SIMD forms agree within float rounding: they sum in
// other orders).
//
// A tile is up to kFlashTile cache cells of one kv head, widened to f32 rows
// (K: [n][dk], V: [n][dv], row-major with a leading dimension) from the
// cache's type: f16 and bf16 exactly, q8_0 / q4_0 blocks of 32 as
// d * q (q4_0: d * (nibble - 8)), low nibbles first, as ggml's dequantizers.
// The query rows of one kv head (its GQA group, for a few tokens) meet every
// tile: scores by `dots`, the online softmax by `exp_sum` (the op keeps each
// row's running max and sum and rescales its accumulator), V by `accum`.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace opal::cpu {

inline constexpr int64_t kFlashTile = 64;

struct FlashKernels {
  const char* name;
  // dst[r * ld + i] = f32(row r)[i] for r < n, i < d, where row r is the d values at base + cells[r] * stride
  // (base points at the head's first element or block). One per cache type; d a multiple of 32 for q8_0/q4_0.
  void (*widen_f16)(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                    int64_t ld);
  void (*widen_q8_0)(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                     int64_t ld);
  void (*widen_q4_0)(const uint8_t* base, uint64_t stride, const int32_t* cells, int64_t n, int64_t d, float* dst,
                     int64_t ld);
  // s[j * lds + r] = scale * sum_i q[j * ldq + i] * k[r * ldk + i], for j < m, r < n.
  void (*dots)(const float* q, int64_t ldq, int64_t m, const float* k, int64_t ldk, int64_t n, int64_t dk, float scale,
               float* s, int64_t lds);
  // s[r] = exp(s[r] - mx) for r < n (-inf gives 0); returns their sum. mx >= every s[r], finite.
  float (*exp_sum)(float* s, int64_t n, float mx);
  // s[r] = -inf for r < n outside [a, e) (0 <= a, e <= n); returns the maximum of s[0..n) after that (-inf when
  // nothing is left). The maximum is exact, so every ISA returns the same value.
  float (*mask_max)(float* s, int64_t n, int64_t a, int64_t e);
  // acc[j * lda + i] += sum_r p[j * ldp + r] * v[r * ldv + i], for j < m, i < dv, r < n.
  void (*accum)(const float* p, int64_t ldp, int64_t m, const float* v, int64_t ldv, int64_t n, int64_t dv, float* acc,
                int64_t lda);
  // Decode's few query rows (m <= kFlashDirectRows) over an f16 cache, read in place (no widened tile; each K
  // or V row is converted in registers once for all m rows); d (dk, dv) a multiple of 16. Row r of the tile is
  // the f16 row at base + cells[r] * stride. dots_f16: as dots with k = f32(rows); accum_f16: as accum with
  // v = f32(rows).
  void (*dots_f16)(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                   int64_t n, int64_t dk, float scale, float* s, int64_t lds);
  void (*accum_f16)(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                    int64_t n, int64_t dv, float* acc, int64_t lda);
  // The same over a q8_0 cache (rows of 32-blocks, d a multiple of 32): the values are d * q, as widen_q8_0's.
  void (*dots_q8_0)(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                    int64_t n, int64_t dk, float scale, float* s, int64_t lds);
  void (*accum_q8_0)(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                     int64_t n, int64_t dv, float* acc, int64_t lda);
  // And over a q4_0 cache: the values are d * (nibble - 8), low nibbles first, as widen_q4_0's.
  void (*dots_q4_0)(const float* q, int64_t ldq, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                    int64_t n, int64_t dk, float scale, float* s, int64_t lds);
  void (*accum_q4_0)(const float* p, int64_t ldp, int64_t m, const uint8_t* base, uint64_t stride, const int32_t* cells,
                     int64_t n, int64_t dv, float* acc, int64_t lda);
  // The in-place f16 forms give each of their loads one address stride over a tile (dk 64 / 128 unrolled, V rows
  // of up to 128 columns in one pass), so the hardware's stride prefetcher follows a decode's cells: the op then
  // issues no software prefetch for an f16 cache of those shapes and walks one kv head per unit, where the
  // host's decode takes no software prefetch for its weights either (decode_prefetch(), matmul_kernels.h: AMD's
  // AVX-512 cores; ops/attention_flash.cpp).
  bool strided_f16;
  // Decode's integer K·q over a q8_0 (q4_0) cache, read in place, as llama.cpp's flash attention takes it on x86
  // (q converted to q8_0 once per row, vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0 per cell): per 32-block of a
  // cell, 8 exact int32 lanes (lane l: the products of elements 4l..4l+3 of K's quants, q4_0's as nibble - 8,
  // and q's), acc[l] = fma(d_k * d_q, float(lane), acc[l]) over the blocks in order, then hsum8's tree
  // ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) (llama_order.h); s[j * lds + r] = that * scale. Every
  // ISA gives the reference's bits. q8: m rows of flash_q8_row (made for this K type), row j at q8 + j * ldq8
  // bytes; the cells, n, dk (a multiple of 32) and s as dots_q8_0's; m <= kFlashDirectRows.
  void (*dots_q8_0_int)(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                        const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds);
  void (*dots_q4_0_int)(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                        const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds);
  // The online-softmax step of m query rows over one tile of n cells (ops/attention_flash.cpp), in one call:
  // flash_online_softmax below with this ISA's mask_max and exp_sum (the same bits as calling them row by row).
  void (*online_softmax)(float* s, int64_t lds, int64_t m, int64_t n, const int64_t* lo, const int64_t* hi, int64_t r0,
                         float* mrow, float* lrow, float* acc, int64_t lda, int64_t dv);
};

// The online-softmax step of rows j < m of a tile of n cells starting at visible cell r0. Row j's scores
// s[j * lds + r] outside its visible cells [lo[j] - r0, hi[j] - r0) (clamped to [0, n]) become -inf and tmax is
// the maximum of the rest (MaskMax). A row with nothing visible gets weights 0 and keeps its state. Otherwise
// mnew = max(mrow[j], tmax), alpha = 0 at the row's first visible cells (mrow[j] = -inf), 1 when the maximum
// did not change (no exp, no rescale: e^0), else e^(mrow[j] - mnew) (std::exp); the scores become the weights
// e^(s - mnew) (ExpSum), lrow[j] = lrow[j] * alpha + their sum, the accumulator row acc[j * lda + i < dv] is
// multiplied by alpha (ScaleRow: one multiply a value) unless alpha is 1, and mrow[j] = mnew. Each ISA
// instantiates it with its own kernels (functions of internal linkage, inlined).
template <float (*MaskMax)(float*, int64_t, int64_t, int64_t), float (*ExpSum)(float*, int64_t, float),
          void (*ScaleRow)(float*, int64_t, float)>
void flash_online_softmax(float* s, int64_t lds, int64_t m, int64_t n, const int64_t* lo, const int64_t* hi, int64_t r0,
                          float* mrow, float* lrow, float* acc, int64_t lda, int64_t dv) {
  for (int64_t j = 0; j < m; ++j) {
    float* sj = s + j * lds;
    const int64_t a = std::clamp<int64_t>(lo[j] - r0, 0, n), e = std::clamp<int64_t>(hi[j] - r0, 0, n);
    const float tmax = MaskMax(sj, n, a, e);
    if (tmax == -INFINITY) {  // nothing visible here: weights 0
      std::fill(sj, sj + n, 0.0f);
      continue;
    }
    const float mj = mrow[j];
    const float mnew = std::max(mj, tmax);
    const float alpha = mj == -INFINITY ? 0.0f : mnew == mj ? 1.0f : std::exp(mj - mnew);
    lrow[j] = lrow[j] * alpha + ExpSum(sj, n, mnew);
    if (alpha != 1.0f) ScaleRow(acc + j * lda, dv, alpha);
    mrow[j] = mnew;
  }
}

// A query row rounded to q8_0 for the integer dots (dots_q8_0_int / dots_q4_0_int) by llama.cpp's x86
// quantize_row_q8_0 (core/quant/activation.h: 127 / amax, half to even), flash_q8_row_bytes(dk) bytes, nb =
// dk / 32 blocks: at 64 * b block b's 32 quants, twice (one 512-bit load gives the block to two cells); at
// 64 * nb + 64 * b its 8 int32 lane starts, twice: lane l = -off * (q[4l] + .. + q[4l + 3]), off 128 for a
// q8_0 K (whose quants the SIMD forms read as k + 128, unsigned) and 8 for a q4_0 K (its nibbles are k + 8),
// so that start + sum((k + off) * q) is the lane's exact sum of k * q; at 128 * nb + 4 * b its scale, the f32
// of the block's f16. dk a multiple of 32.
inline constexpr int64_t flash_q8_row_bytes(int64_t dk) { return (dk / 32 * 132 + 63) / 64 * 64; }
void flash_q8_row(DType k_type, const float* q, int64_t dk, uint8_t* dst);

// The most query rows the in-place f16 forms take (a decode's GQA group: SmolLM2 3, Qwen3 2, Llama 3.2 4).
inline constexpr int64_t kFlashDirectRows = 4;

// K's tile transposed for a register-tiled `dots`: kt[i * kFlashTile + r] = k[r * ldk + i] for r < n, i < dk,
// and 0 for the rows of the last 8-row group past n. Transpose8(in, ldi, out, ldo) moves one 8x8 block; each
// ISA passes its own (a function of internal linkage, so every ISA's file instantiates its own copy).
template <void (*Transpose8)(const float*, int64_t, float*, int64_t)>
void flash_transpose_k_tile(const float* k, int64_t ldk, int64_t n, int64_t dk, float* kt) {
  alignas(64) float pad[8 * 8];
  const int64_t d8 = dk & ~int64_t(7);
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t rows = n - r0 < 8 ? n - r0 : 8;
    for (int64_t i0 = 0; i0 < d8; i0 += 8) {
      if (rows == 8) {
        Transpose8(k + r0 * ldk + i0, ldk, kt + i0 * kFlashTile + r0, kFlashTile);
        continue;
      }
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t i = 0; i < 8; ++i) pad[r * 8 + i] = r < rows ? k[(r0 + r) * ldk + i0 + i] : 0.0f;
      Transpose8(pad, 8, kt + i0 * kFlashTile + r0, kFlashTile);
    }
    for (int64_t i = d8; i < dk; ++i)
      for (int64_t r = 0; r < 8; ++r) kt[i * kFlashTile + r0 + r] = r < rows ? k[(r0 + r) * ldk + i] : 0.0f;
  }
}

// The selected ISA's kernels (avx2-vnni uses the AVX2 forms but for its integer dots; scalar: the reference).
const FlashKernels& flash_kernels();
// The reference forms (every ISA's test oracle).
const FlashKernels& ref_flash_kernels();

namespace avx2 {
extern const FlashKernels kFlashKernels;
}
namespace avx512 {
extern const FlashKernels kFlashKernels;
}
// avx2-vnni: the avx2 kernels with these integer dots (vpdpbusd; attn_dispatch.cpp builds its table).
namespace avx2vnni {
void flash_dots_q8_0_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                         const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds);
void flash_dots_q4_0_int(const uint8_t* q8, int64_t ldq8, int64_t m, const uint8_t* base, uint64_t stride,
                         const int32_t* cells, int64_t n, int64_t dk, float scale, float* s, int64_t lds);
}  // namespace avx2vnni

}  // namespace opal::cpu
