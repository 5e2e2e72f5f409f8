/* et_math.h - float math without the instructions ET-SoC-1 lacks (no fdiv.s, fsqrt.s, frsq.ps,
 * fsin.ps, no 64-bit int<->float converts): only add, multiply, fused multiply-add, compares
 * and integer operations on the bits. Plain C, compiled for the device and, unchanged, for the
 * host unit test (tests/et_kernels/test_et_math.cpp) that sweeps the error bounds below.
 *
 *   et_recipf(x)    1/x: seed 0x7EF311C3 - bits(|x|) (max rel. error 1/8), three Newton steps
 *                   y += y*(1 - x*y). |x| in [2^-125, 2^125]; max error 1 ulp (measured).
 *   et_divf(a, b)   a/b: q = a*recip(b), one residual step q += (a - q*b)*recip(b) (fused);
 *                   max error 1 ulp (correctly rounded in nearly all cases).
 *   et_rsqrtf(x)    1/sqrt(x): seed 0x5F375A86 - bits/2, three Newton steps y *= 1.5 - x/2*y*y,
 *                   then one fused residual step. x in [2^-125, 2^125]; max error 2 ulp.
 *   et_expf(x)      e^x: n = round(x*log2 e) (magic-number rounding), r = x - n*ln2 (two fused
 *                   steps, ln2 split hi/lo), degree-7 Taylor polynomial on |r| <= ln2/2, 2^n
 *                   by adding n to the exponent bits (two steps so 2^n may be subnormal-free up
 *                   to n = -126). x clamped to [-87.34, 88.72] (1.2e-38 .. 3.4e38); max error
 *                   2 ulp.
 *   et_sigmoidf(x)  1/(1 + e^-x), x clamped to [-80, 80]; et_siluf(x) = x*sigmoid(x).
 *   et_sincosf(x)   sin and cos: k = round(x*2/pi), r = x - k*pi/2 with pi/2 in three parts
 *                   (fused, exact for |k| < 2^17: |x| <= 1e5), Taylor polynomials of degree
 *                   11 (sin) and 12 (cos) on |r| <= pi/4, quadrant from k & 3; max abs error
 *                   1e-7 for |x| <= 1e5.
 * Packed 8-lane versions (device only, et_exp8 / et_silu8 / et_recip8 in place on 8 floats in
 * memory) run the same steps with .ps instructions, so their results equal the scalar ones
 * bit for bit (checked on the emulator).
 */
#ifndef OPAL_ET_MATH_H
#define OPAL_ET_MATH_H

#include <stdint.h>

#ifdef __cplusplus
#include <cmath>
#define ET_MATH_FMA(a, b, c) std::fma((a), (b), (c))
#define ET_MATH_INLINE inline
#else
#define ET_MATH_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define ET_MATH_INLINE static inline
#endif

ET_MATH_INLINE uint32_t et_math_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v;
  v.f = f;
  return v.u;
}

ET_MATH_INLINE float et_math_float(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = u;
  return v.f;
}

ET_MATH_INLINE float et_recipf(float x) {
  uint32_t sign = et_math_bits(x) & 0x80000000u;
  float ax = et_math_float(et_math_bits(x) & 0x7fffffffu);
  float y = et_math_float(0x7EF311C3u - et_math_bits(ax));
  for (int i = 0; i < 3; ++i) {
    float e = ET_MATH_FMA(-ax, y, 1.0f);
    y = ET_MATH_FMA(y, e, y);
  }
  return et_math_float(et_math_bits(y) | sign);
}

ET_MATH_INLINE float et_divf(float a, float b) {
  float r = et_recipf(b);
  float q = a * r;
  float rem = ET_MATH_FMA(-q, b, a);
  return ET_MATH_FMA(rem, r, q);
}

ET_MATH_INLINE float et_rsqrtf(float x) {
  float half = 0.5f * x;
  float y = et_math_float(0x5F375A86u - (et_math_bits(x) >> 1));
  for (int i = 0; i < 3; ++i) y = y * ET_MATH_FMA(-half, y * y, 1.5f);
  /* residual step: y += y/2 * (1 - x*y*y), with x*y*y formed as fma(x*y, y, -1) */
  float xy = x * y;
  float e = ET_MATH_FMA(-xy, y, 1.0f);
  return ET_MATH_FMA(0.5f * y, e, y);
}

#define ET_EXP_LOG2E 1.44269504088896341f
#define ET_EXP_LN2_HI 0.693145751953125f /* 12 significant bits: n * hi exact */
#define ET_EXP_LN2_LO 1.42860682030941723212e-6f
#define ET_EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define ET_EXP_MIN (-87.33654f)
#define ET_EXP_MAX 88.72283f

ET_MATH_INLINE float et_expf(float x) {
  if (x < ET_EXP_MIN) x = ET_EXP_MIN; /* e^x ~ 1.2e-38: a softmax weight of nothing */
  if (x > ET_EXP_MAX) x = ET_EXP_MAX; /* e^x ~ 3.4e38 */
  float t = ET_MATH_FMA(x, ET_EXP_LOG2E, ET_EXP_MAGIC);
  float n = t - ET_EXP_MAGIC;
  float r = ET_MATH_FMA(-n, ET_EXP_LN2_HI, x);
  r = ET_MATH_FMA(-n, ET_EXP_LN2_LO, r);
  float p = 1.0f / 5040.0f;
  p = ET_MATH_FMA(p, r, 1.0f / 720.0f);
  p = ET_MATH_FMA(p, r, 1.0f / 120.0f);
  p = ET_MATH_FMA(p, r, 1.0f / 24.0f);
  p = ET_MATH_FMA(p, r, 1.0f / 6.0f);
  p = ET_MATH_FMA(p, r, 0.5f);
  p = ET_MATH_FMA(p, r, 1.0f);
  p = ET_MATH_FMA(p, r, 1.0f);
  /* 2^n in two halves: n in [-126, 128]; each half's scale is a normal float */
  int32_t ni = (int32_t)(et_math_bits(t) - et_math_bits(ET_EXP_MAGIC));
  int32_t n1 = ni / 2, n2 = ni - n1;
  float s1 = et_math_float((uint32_t)(127 + n1) << 23), s2 = et_math_float((uint32_t)(127 + n2) << 23);
  return p * s1 * s2;
}

ET_MATH_INLINE float et_sigmoidf(float x) {
  if (x < -80.0f) x = -80.0f;
  if (x > 80.0f) x = 80.0f;
  return et_recipf(1.0f + et_expf(-x));
}

ET_MATH_INLINE float et_siluf(float x) { return x * et_sigmoidf(x); }

#define ET_TWO_OVER_PI 0.636619772367581343f
#define ET_PIO2_1 1.5707963705062866211f        /* float(pi/2)          */
#define ET_PIO2_2 (-4.3711388286737928865e-08f) /* next 24 bits        */
#define ET_PIO2_3 (-1.7151245100059317e-15f)    /* the rest (24 bits)   */

ET_MATH_INLINE void et_sincosf(float x, float* s, float* c) {
  float t = ET_MATH_FMA(x, ET_TWO_OVER_PI, ET_EXP_MAGIC);
  float k = t - ET_EXP_MAGIC;
  uint32_t q = (et_math_bits(t) - et_math_bits(ET_EXP_MAGIC)) & 3u;
  float r = ET_MATH_FMA(-k, ET_PIO2_1, x);
  r = ET_MATH_FMA(-k, ET_PIO2_2, r);
  r = ET_MATH_FMA(-k, ET_PIO2_3, r);
  float r2 = r * r;
  float ps = -1.0f / 39916800.0f;
  ps = ET_MATH_FMA(ps, r2, 1.0f / 362880.0f);
  ps = ET_MATH_FMA(ps, r2, -1.0f / 5040.0f);
  ps = ET_MATH_FMA(ps, r2, 1.0f / 120.0f);
  ps = ET_MATH_FMA(ps, r2, -1.0f / 6.0f);
  float sn = ET_MATH_FMA(ps * r2, r, r);
  float pc = 1.0f / 479001600.0f;
  pc = ET_MATH_FMA(pc, r2, -1.0f / 3628800.0f);
  pc = ET_MATH_FMA(pc, r2, 1.0f / 40320.0f);
  pc = ET_MATH_FMA(pc, r2, -1.0f / 720.0f);
  pc = ET_MATH_FMA(pc, r2, 1.0f / 24.0f);
  pc = ET_MATH_FMA(pc, r2, -0.5f);
  float cs = ET_MATH_FMA(pc, r2, 1.0f);
  switch (q) {
    case 0:
      *s = sn;
      *c = cs;
      break;
    case 1:
      *s = cs;
      *c = -sn;
      break;
    case 2:
      *s = -sn;
      *c = -cs;
      break;
    default:
      *s = -cs;
      *c = sn;
      break;
  }
}

#if defined(__riscv)
#include "backends/et/kernels/et_insn.h"

/* Constants of the packed versions, one 32-bit word each (broadcast with fbc.ps). */
static const union {
  float f;
  uint32_t u;
} et_math_k[19] = {{.f = ET_EXP_MIN},    {.f = ET_EXP_MAX},    {.f = ET_EXP_LOG2E},   {.f = ET_EXP_MAGIC},
                   {.f = ET_EXP_LN2_HI}, {.f = ET_EXP_LN2_LO}, {.f = 1.0f / 5040.0f}, {.f = 1.0f / 720.0f},
                   {.f = 1.0f / 120.0f}, {.f = 1.0f / 24.0f},  {.f = 1.0f / 6.0f},    {.f = 0.5f},
                   {.f = 1.0f},          {.u = 127u},          {.f = -80.0f},         {.f = 80.0f},
                   {.u = 0x7EF311C3u},   {.u = 0x7fffffffu},   {.u = 0x80000000u}};

// clang-format off
/* e^ft0 -> ft6 (ft0 clamped in place; ft1-ft6 clobbered). The steps of et_expf. */
#define ETM_EXP_FT0_TO_FT6                                                  \
  ETI_FBC(ft1, 0, k) ETI_FMAX(ft0, ft0, ft1)           /* clamp low  */     \
  ETI_FBC(ft1, 4, k) ETI_FMIN(ft0, ft0, ft1)           /* clamp high */     \
  ETI_FBC(ft1, 8, k) ETI_FBC(ft2, 12, k)                                    \
  ETI_FMADD(ft3, ft0, ft1, ft2)                        /* t = x log2e + M */ \
  ETI_FSUB(ft4, ft3, ft2)                              /* n */              \
  ETI_FBC(ft1, 16, k) ETI_FNMSUB(ft5, ft4, ft1, ft0)   /* r = x - n hi */   \
  ETI_FBC(ft1, 20, k) ETI_FNMSUB(ft5, ft4, ft1, ft5)   /* r -= n lo */      \
  ETI_FBC(ft6, 24, k)                                  /* p = 1/5040 */     \
  ETI_FBC(ft1, 28, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FBC(ft1, 32, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FBC(ft1, 36, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FBC(ft1, 40, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FBC(ft1, 44, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FBC(ft1, 48, k) ETI_FMADD(ft6, ft6, ft5, ft1)                         \
  ETI_FMADD(ft6, ft6, ft5, ft1)                        /* p */              \
  ETI_FSUB_PI(ft3, ft3, ft2)                           /* ni */             \
  ETI_FSRLI_PI(ft4, ft3, 31) ETI_FADD_PI(ft4, ft3, ft4)                     \
  ETI_FSRAI_PI(ft4, ft4, 1)                            /* n1 = ni / 2 */    \
  ETI_FSUB_PI(ft3, ft3, ft4)                           /* n2 = ni - n1 */   \
  ETI_FBC(ft1, 52, k)                                                       \
  ETI_FADD_PI(ft4, ft4, ft1) ETI_FSLLI_PI(ft4, ft4, 23) /* 2^n1 */          \
  ETI_FADD_PI(ft3, ft3, ft1) ETI_FSLLI_PI(ft3, ft3, 23) /* 2^n2 */          \
  ETI_FMUL(ft6, ft6, ft4) ETI_FMUL(ft6, ft6, ft3)

/* 1/ft0 -> ft3 (ft1, ft2, ft4, ft5 clobbered). The steps of et_recipf. */
#define ETM_RECIP_FT0_TO_FT3                                               \
  ETI_FBC(ft1, 68, k) ETI_FAND_PI(ft2, ft0, ft1)       /* |x| */           \
  ETI_FBC(ft1, 72, k) ETI_FAND_PI(ft4, ft0, ft1)       /* sign */          \
  ETI_FBC(ft1, 64, k) ETI_FSUB_PI(ft3, ft1, ft2)       /* seed */          \
  ETI_FBC(ft1, 48, k)                                                      \
  ETI_FNMSUB(ft5, ft2, ft3, ft1) ETI_FMADD(ft3, ft3, ft5, ft3)             \
  ETI_FNMSUB(ft5, ft2, ft3, ft1) ETI_FMADD(ft3, ft3, ft5, ft3)             \
  ETI_FNMSUB(ft5, ft2, ft3, ft1) ETI_FMADD(ft3, ft3, ft5, ft3)             \
  ETI_FOR_PI(ft3, ft3, ft4)
// clang-format on

#define ETM_CLOBBERS "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "ft8", "memory"

/* dst[0:8] = e^src[0:8] (dst may equal src). */
static inline void et_exp8(float* dst, const float* src) {
  __asm__ volatile(ETI_FLW(ft0, 0, s) ETM_EXP_FT0_TO_FT6 ETI_FSW(ft6, 0, d)
                   :
                   : [s] "r"(src), [d] "r"(dst), [k] "r"(et_math_k)
                   : ETM_CLOBBERS);
}

/* dst[0:8] = 1/src[0:8]. */
static inline void et_recip8(float* dst, const float* src) {
  __asm__ volatile(ETI_FLW(ft0, 0, s) ETM_RECIP_FT0_TO_FT3 ETI_FSW(ft3, 0, d)
                   :
                   : [s] "r"(src), [d] "r"(dst), [k] "r"(et_math_k)
                   : ETM_CLOBBERS);
}

/* dst[0:8] = silu(src[0:8]); with gate != 0: dst = silu(src) * gate[0:8] (SWIGLU, the product
 * rounded after the silu as the CPU does). */
static inline void et_silu8(float* dst, const float* src, const float* gate) {
  if (gate)
    __asm__ volatile(ETI_FLW(ft8, 0, s) ETI_FBC(ft1, 56, k) ETI_FMAX(ft0, ft8, ft1) ETI_FBC(ft1, 60, k)
                         ETI_FMIN(ft0, ft0, ft1) ETI_FSGNJN(ft0, ft0, ft0) ETM_EXP_FT0_TO_FT6 ETI_FBC(ft1, 48, k)
                             ETI_FADD(ft0, ft1, ft6) ETM_RECIP_FT0_TO_FT3 ETI_FMUL(ft7, ft8, ft3) ETI_FLW(ft1, 0, g)
                                 ETI_FMUL(ft7, ft7, ft1) ETI_FSW(ft7, 0, d)
                     :
                     : [s] "r"(src), [d] "r"(dst), [g] "r"(gate), [k] "r"(et_math_k)
                     : ETM_CLOBBERS);
  else
    __asm__ volatile(ETI_FLW(ft8, 0, s) ETI_FBC(ft1, 56, k) ETI_FMAX(ft0, ft8, ft1) ETI_FBC(ft1, 60, k)
                         ETI_FMIN(ft0, ft0, ft1) ETI_FSGNJN(ft0, ft0, ft0) ETM_EXP_FT0_TO_FT6 ETI_FBC(ft1, 48, k)
                             ETI_FADD(ft0, ft1, ft6) ETM_RECIP_FT0_TO_FT3 ETI_FMUL(ft7, ft8, ft3) ETI_FSW(ft7, 0, d)
                     :
                     : [s] "r"(src), [d] "r"(dst), [k] "r"(et_math_k)
                     : ETM_CLOBBERS);
}
#endif /* __riscv */

#endif /* OPAL_ET_MATH_H */
