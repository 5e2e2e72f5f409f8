/* get_rows.c - GET_ROWS: table [K, R, B] (F32, F16, Q8_0, Q4_0, Q4_K, Q6_K) rows picked by I32 ids
 * [n, B] into F32 [K, n, B], dequantized exactly as core/quant does (products and differences
 * rounded one at a time, so the results equal the CPU's bit for bit):
 *   F32 copy and F16 (fgh.ps + fcvt.ps.f16, which flushes f16 subnormals: those are redone in
 *   software) 8 lanes at a time; Q8_0 y = d*q; Q4_0 y = (q-8)*d
 *   (fgb.ps gathers, fcvt.ps.pw, fmul.ps by the broadcast scale); Q4_K y = d*sc*q - dmin*m per
 *   32-sub-block (6-bit scales as ggml packs them); Q6_K y = d*sc*q (et_q6_k.h).
 * An id outside [0, R) gives a row of zeros (as the CPU op). SPMD: output rows over the harts in
 * groups starting on 64-byte lines. dst contiguous; K a whole number of blocks (F32 / F16: any K,
 * e.g. the MoE router's rows of one weight; 8 lanes where the row is 32-byte aligned).
 */
#include "backends/et/kernels/et_q6_k.h"
#include "backends/et/kernels/et_runtime.h"

static const int32_t k_off8[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static const int32_t k_off16[8] = {0, 2, 4, 6, 8, 10, 12, 14};
static const int32_t k_consts[2] = {15, 8};

static int64_t row_grain(int64_t ne0) {
  int64_t r = ne0 % 16, g = 1;
  if (r == 0) return 1;
  while ((g * r) % 16 != 0) ++g;
  return g;
}

/* 8 int8 (or nibble-derived int) lanes times a scale -> 8 floats. qs: 32 int8 quants of one
 * block; out = d * q. */
static void dequant_q8_block(float* out, const int8_t* qs, float d) {
  __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o) ETI_FLW(ft11, 96, o) ETI_FBC(ft7, 0, d)
                       ETI_FGB(ft0, ft8, q) ETI_FCVT_PS_PW(ft0, ft0) ETI_FMUL(ft0, ft7, ft0) ETI_FSW(ft0, 0, y)
                           ETI_FGB(ft0, ft9, q) ETI_FCVT_PS_PW(ft0, ft0) ETI_FMUL(ft0, ft7, ft0) ETI_FSW(ft0, 32, y)
                               ETI_FGB(ft0, ft10, q) ETI_FCVT_PS_PW(ft0, ft0) ETI_FMUL(ft0, ft7, ft0)
                                   ETI_FSW(ft0, 64, y) ETI_FGB(ft0, ft11, q) ETI_FCVT_PS_PW(ft0, ft0)
                                       ETI_FMUL(ft0, ft7, ft0) ETI_FSW(ft0, 96, y)
                   :
                   : [o] "r"(k_off8), [d] "r"(&d), [q] "r"(qs), [y] "r"(out)
                   : "ft0", "ft7", "ft8", "ft9", "ft10", "ft11", "memory");
}

/* Q4_0: y[j] = (lo(qs[j]) - 8) * d, y[j + 16] = (hi(qs[j]) - 8) * d (the CPU's order). */
static void dequant_q4_0_block(float* out, const uint8_t* qs, float d) {
  __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FBC(ft7, 0, d) ETI_FBC(ft5, 0, c) ETI_FBC(ft6, 4, c)
                       ETI_FGB(ft0, ft8, q) ETI_FAND_PI(ft1, ft0, ft5) ETI_FSUB_PI(ft1, ft1, ft6)
                           ETI_FCVT_PS_PW(ft1, ft1) ETI_FMUL(ft1, ft1, ft7) ETI_FSW(ft1, 0, y) ETI_FSRLI_PI(ft0, ft0, 4)
                               ETI_FAND_PI(ft0, ft0, ft5) ETI_FSUB_PI(ft0, ft0, ft6) ETI_FCVT_PS_PW(ft0, ft0)
                                   ETI_FMUL(ft0, ft0, ft7) ETI_FSW(ft0, 64, y) ETI_FGB(ft0, ft9, q)
                                       ETI_FAND_PI(ft1, ft0, ft5) ETI_FSUB_PI(ft1, ft1, ft6) ETI_FCVT_PS_PW(ft1, ft1)
                                           ETI_FMUL(ft1, ft1, ft7) ETI_FSW(ft1, 32, y) ETI_FSRLI_PI(ft0, ft0, 4)
                                               ETI_FAND_PI(ft0, ft0, ft5) ETI_FSUB_PI(ft0, ft0, ft6)
                                                   ETI_FCVT_PS_PW(ft0, ft0) ETI_FMUL(ft0, ft0, ft7) ETI_FSW(ft0, 96, y)
                   :
                   : [o] "r"(k_off8), [d] "r"(&d), [c] "r"(k_consts), [q] "r"(qs), [y] "r"(out)
                   : "ft0", "ft1", "ft5", "ft6", "ft7", "ft8", "ft9", "memory");
}

static void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

static void dequant_row(uint32_t type, const uint8_t* src, float* y, int64_t k) {
  switch (type) {
    case ET_TYPE_F32: {
      /* 8 lanes where the row is 32-byte aligned (packed loads and stores), the rest one by one */
      int64_t i = 0;
      if (((uintptr_t)src | (uintptr_t)y) % 32 == 0)
        for (; i + 8 <= k; i += 8)
          __asm__ volatile(ETI_FLW(ft0, 0, s) ETI_FSW(ft0, 0, y)
                           :
                           : [s] "r"(src + 4 * i), [y] "r"(y + i)
                           : "ft0", "memory");
      for (; i < k; ++i) y[i] = ((const float*)src)[i];
      return;
    }
    case ET_TYPE_F16: {
      int64_t i = 0;
      if ((uintptr_t)y % 32 == 0)
        for (; i + 8 <= k; i += 8)
          __asm__ volatile(ETI_FLW(ft1, 0, o) ETI_FGH(ft0, ft1, s) ETI_FCVT_PS_F16(ft0, ft0) ETI_FSW(ft0, 0, y)
                           :
                           : [o] "r"(k_off16), [s] "r"(src + 2 * i), [y] "r"(y + i)
                           : "ft0", "ft1", "memory");
      /* fcvt.ps.f16 flushes f16 subnormals to zero: redo those (and the tail) in software, exact */
      const uint16_t* h = (const uint16_t*)src;
      for (int64_t j = 0; j < k; ++j)
        if (j >= i || ((h[j] & 0x7c00u) == 0 && (h[j] & 0x3ffu) != 0)) y[j] = et_f16_to_f32(h[j]);
      return;
    }
    case ET_TYPE_Q8_0:
      for (int64_t b = 0; b < k / 32; ++b, src += 34)
        dequant_q8_block(y + 32 * b, (const int8_t*)(src + 2), et_f16_to_f32((uint16_t)(src[0] | (src[1] << 8))));
      return;
    case ET_TYPE_Q4_0:
      for (int64_t b = 0; b < k / 32; ++b, src += 18)
        dequant_q4_0_block(y + 32 * b, src + 2, et_f16_to_f32((uint16_t)(src[0] | (src[1] << 8))));
      return;
    case ET_TYPE_Q6_K:
      for (int64_t b = 0; b < k / 256; ++b, src += 210) et_dequant_q6_k_block(src, y + 256 * b);
      return;
    default: /* Q4_K */
      for (int64_t b = 0; b < k / 256; ++b, src += 144) {
        const float d = et_f16_to_f32((uint16_t)(src[0] | (src[1] << 8)));
        const float dmin = et_f16_to_f32((uint16_t)(src[2] | (src[3] << 8)));
        const uint8_t* qs = src + 16;
        float* yb = y + 256 * b;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          scale_min_k4(j, src + 4, &sc, &m);
          const float d1 = d * (float)sc, m1 = dmin * (float)m;
          const uint8_t* q = qs + 32 * (j / 2);
          for (int l = 0; l < 32; ++l) {
            const int v = (j & 1) ? (q[l] >> 4) : (q[l] & 0xF);
            yb[32 * j + l] = d1 * (float)v - m1;
          }
        }
      }
      return;
  }
}

static int64_t get_rows(const void* args, uint32_t want) {
  const EtGetRowsArgs* p = (const EtGetRowsArgs*)args;
  const EtTensor *tb = &p->table, *ids = &p->ids, *d = &p->dst;
  if (tb->type != want) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (ids->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  const int64_t K = tb->ne[0], n = ids->ne[0], B = ids->ne[1];
  const int64_t kb = (want == ET_TYPE_Q4_K || want == ET_TYPE_Q6_K)   ? 256
                     : (want == ET_TYPE_Q8_0 || want == ET_TYPE_Q4_0) ? 32
                                                                      : 1;
  if (K % kb != 0 || d->ne[0] != K || d->ne[1] != n || d->ne[2] != B) return et_fail(ET_STATUS_BAD_SHAPE, 2);
  if (tb->ne[2] != B && tb->ne[2] != 1) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (d->nb[0] != 4 || d->nb[1] != 4 * (uint64_t)K || d->nb[2] != d->nb[1] * (uint64_t)n)
    return et_fail(ET_STATUS_BAD_SHAPE, 2); /* row groups fill whole lines only in a contiguous dst */
  if (kb > 1 && (d->addr | d->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 2);
  int64_t r0, r1;
  et_split(et_spmd(&p->h), n * B, row_grain(K), &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r % n, b = r / n;
    const int32_t id = *(const int32_t*)(uintptr_t)(ids->addr + i * ids->nb[0] + b * ids->nb[1]);
    float* y = (float*)(uintptr_t)(d->addr + i * d->nb[1] + b * d->nb[2]);
    if (id < 0 || id >= tb->ne[1]) {
      for (int64_t k = 0; k < K; ++k) y[k] = 0.0f;
      continue;
    }
    const uint8_t* src = (const uint8_t*)(uintptr_t)(tb->addr + (uint64_t)id * tb->nb[1] +
                                                     (uint64_t)(tb->ne[2] == 1 ? 0 : b) * tb->nb[2]);
    dequant_row(want, src, y, K);
  }
  return ET_STATUS_OK;
}

static int64_t get_rows_f32(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_F32);
}
static int64_t get_rows_f16(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_F16);
}
static int64_t get_rows_q8_0(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_Q8_0);
}
static int64_t get_rows_q4_0(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_Q4_0);
}
static int64_t get_rows_q4_k(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_Q4_K);
}
ET_KERNEL(ET_K_GET_ROWS_F32, get_rows_f32);
ET_KERNEL(ET_K_GET_ROWS_F16, get_rows_f16);
ET_KERNEL(ET_K_GET_ROWS_Q8_0, get_rows_q8_0);
ET_KERNEL(ET_K_GET_ROWS_Q4_0, get_rows_q4_0);
ET_KERNEL(ET_K_GET_ROWS_Q4_K, get_rows_q4_k);
static int64_t get_rows_q6_k(const void* a, const EtEnv* e) {
  (void)e;
  return get_rows(a, ET_TYPE_Q6_K);
}
ET_KERNEL(ET_K_GET_ROWS_Q6_K, get_rows_q6_k);
