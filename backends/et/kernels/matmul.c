/* matmul.c - MUL_MAT and MUL_MAT_ID: f32 activations x weights in F32, F16, Q8_0, Q4_0 or Q4_K
 * (GGUF blocks).
 *
 * dst[n, t, b] = dot(w row n of batch b / (B'/B), x row t of batch b), as the CPU reference
 * (backends/cpu/kernels/ref/matmul_ref.cpp) defines it, activations rounded the same way:
 *   F32: x as is; F16: x rounded to f16 (llama.cpp's vec_dot type), 8 lanes (fgh.ps +
 *   fcvt.ps.f16 for the weights, fcvt.f16.ps + fcvt.ps.f16 to round x; both conversions flush
 *   f16 subnormals, |v| < 2^-14, to zero: each such weight or activation changes the dot by
 *   less than 2^-14 times its partner, which the CPU keeps);
 *   Q8_0 / Q4_0: x quantized to Q8_0 per 32-block (d = amax/127 rounded to f16, q =
 *   round(x*127/amax)), then per block the exact integer dot in int32 lanes (fgb.ps gathers
 *   of the int8 / nibble quants, fmul.pi, fadd.pi) and acc = fma(d_w*d_x, lanes, acc) in 8
 *   float lanes, summed at the end; Q4_0 nibbles: lo = q & 15 - 8 pairs x[0..15], hi = q >> 4
 *   - 8 pairs x[16..31];
 *   Q4_K: x quantized to Q8_K per 256-block (iscale = -127/max, q = round(iscale*x), d =
 *   1/iscale); per 32-sub-block the exact integer dot and the sum of the x quants, then
 *   acc += d_x*(d*sc*isum - dmin*m*xsum) (6-bit scales and mins as ggml packs them);
 *   Q6_K: x quantized to Q8_K and kept as the floats d_x*q (what the CPU reference multiplies),
 *   each weight super-block dequantized exactly (et_q6_k.h) into the stack, then 8-lane dots.
 * Work split (SPMD): the N weight rows over the harts in groups of 16 (so each hart writes
 * whole 64-byte lines of every dst row); each hart walks its weight rows once and, for each,
 * all activation rows of the batch: a weight row comes from memory once and is re-read from
 * the cache for the other activation rows. Quantized activations (Q8_0 / Q8_K) are made per
 * hart into a stack buffer, in chunks of activation rows that fit (ET_MM_SCRATCH bytes).
 * MUL_MAT_ID (experts [K, N, E], x [K, S, T], ids I32 [n_used, T] -> dst [N, n_used, T]): for
 * every (slot j, token t) the same dot products with expert ids[j, t] and x row (j % S, t),
 * each hart over its 16-row groups of N; an id outside [0, E) gives zeros (as the CPU). The
 * x row is quantized once per (j, t) per hart; expert weights are re-read per (j, t).
 * Constraints (else ET_STATUS_BAD_SHAPE / BAD_TYPE, the host keeps the node on the CPU):
 * K % 8 == 0 (F32/F16), K % 32 (Q8_0/Q4_0), K % 256 (Q4_K); x and dst rows contiguous and
 * 32-byte aligned; K <= 16384.
 */
#include "backends/et/kernels/et_math.h"
#include "backends/et/kernels/et_q6_k.h"
#include "backends/et/kernels/et_runtime.h"

#define ET_MM_SCRATCH (48 * 1024)
#define ET_MM_MAX_CHUNK 64 /* activation rows per pass over the weights */

/* Gather offsets: lanes 0..7 = {0..7} + 8j (bytes), and 2-byte steps for f16. */
static const int32_t k_off8[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static const int32_t k_off16[8] = {0, 2, 4, 6, 8, 10, 12, 14};
static const int32_t k_nib[2] = {15, 8};

#define MM_CLOBBERS                                                                                                 \
  "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "ft8", "ft9", "ft10", "ft11", "fa0", "fa1", "fa2", "fa3", \
      "fa4", "fa5", "fa6", "fa7", "memory"

/* Sum of the 8 lanes of ft0 -> %[r] (ft1, %[t] clobbered). */
#define MM_HSUM_FT0 ETI_HSUM8(ft2, ft0, ft1, t) "fmv.s %[r], ft2\n\t"

static float dot_f32(const float* w, const float* x, int64_t k) {
  float r;
  int64_t n = k / 8, t;
  __asm__ volatile(ETI_FBCX(ft0, z) "1:\n\t" ETI_FLW(ft1, 0, w) ETI_FLW(ft2, 0, x) ETI_FMADD(
                       ft0, ft1, ft2, ft0) "addi %[w], %[w], 32\n\taddi %[x], %[x], 32\n\taddi %[n], %[n], -1\n\t"
                                           "bnez %[n], 1b\n\t" MM_HSUM_FT0
                   : [w] "+r"(w), [x] "+r"(x), [n] "+r"(n), [r] "=f"(r), [t] "=&r"(t)
                   : [z] "r"(0)
                   : MM_CLOBBERS);
  return r;
}

static float dot_f16(const uint16_t* w, const float* x, int64_t k) {
  float r;
  int64_t n = k / 8, t;
  __asm__ volatile(ETI_FBCX(ft0, z) ETI_FLW(ft11, 0, o) "1:\n\t" ETI_FGH(ft1, ft11, w) ETI_FCVT_PS_F16(ft1, ft1)
                       ETI_FLW(ft2, 0, x) ETI_FCVT_F16_PS(ft2, ft2) ETI_FCVT_PS_F16(ft2, ft2) ETI_FMADD(ft0, ft1, ft2, ft0)
                           "addi %[w], %[w], 16\n\taddi %[x], %[x], 32\n\taddi %[n], %[n], -1\n\t"
                           "bnez %[n], 1b\n\t" MM_HSUM_FT0
                   : [w] "+r"(w), [x] "+r"(x), [n] "+r"(n), [r] "=f"(r), [t] "=&r"(t)
                   : [z] "r"(0), [o] "r"(k_off16)
                   : MM_CLOBBERS);
  return r;
}

/* Q8_0 weights (34-byte blocks) x Q8_0 activations (xq: K int8, xd: K/32 float scales). */
static float dot_q8_0(const uint8_t* w, const int8_t* xq, const float* xd, int64_t k) {
  float r;
  int64_t n = k / 32, t;
  __asm__ volatile(
      ETI_FBCX(ft0, z) ETI_FBCX(ft7, z) ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o)
          ETI_FLW(ft11, 96, o) "1:\n\taddi %[t], %[w], 2\n\t" ETI_FGB(ft1, ft8, t) ETI_FGB(ft2, ft8, q)
              ETI_FMUL_PI(ft1, ft1, ft2) ETI_FGB(ft2, ft9, t) ETI_FGB(ft3, ft9, q) ETI_FMUL_PI(ft2, ft2, ft3)
                  ETI_FADD_PI(ft1, ft1, ft2) ETI_FGB(ft2, ft10, t) ETI_FGB(ft3, ft10, q) ETI_FMUL_PI(ft2, ft2, ft3)
                      ETI_FADD_PI(ft1, ft1, ft2) ETI_FGB(ft2, ft11, t) ETI_FGB(ft3, ft11, q)
                          ETI_FMUL_PI(ft2, ft2, ft3) ETI_FADD_PI(ft1, ft1, ft2) ETI_FCVT_PS_PW(ft1, ft1)
                              ETI_FGH(ft2, ft7, w) ETI_FCVT_PS_F16(ft2, ft2) ETI_FBC(ft3, 0, d) ETI_FMUL(ft2, ft2, ft3)
                                  ETI_FMADD(ft0, ft2, ft1, ft0) "addi %[w], %[w], 34\n\taddi %[q], %[q], 32\n\t"
                                                                "addi %[d], %[d], 4\n\taddi %[n], %[n], -1\n\t"
                                                                "bnez %[n], 1b\n\t" MM_HSUM_FT0
      : [w] "+r"(w), [q] "+r"(xq), [d] "+r"(xd), [n] "+r"(n), [r] "=f"(r), [t] "=&r"(t)
      : [z] "r"(0), [o] "r"(k_off8)
      : MM_CLOBBERS);
  return r;
}

/* Q4_0 weights (18-byte blocks) x Q8_0 activations. */
static float dot_q4_0(const uint8_t* w, const int8_t* xq, const float* xd, int64_t k) {
  float r;
  int64_t n = k / 32, t;
  __asm__ volatile(
      ETI_FBCX(ft0, z) ETI_FBCX(ft7, z) ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o)
          ETI_FLW(ft11, 96, o) ETI_FBC(fa6, 0, m) ETI_FBC(fa7, 4, m) "1:\n\taddi %[t], %[w], 2\n\t" ETI_FGB(
              fa0, ft8, t) ETI_FGB(fa1, ft9, t) ETI_FAND_PI(fa2, fa0, fa6) ETI_FSUB_PI(fa2, fa2, fa7)
              ETI_FSRLI_PI(fa0, fa0, 4) ETI_FAND_PI(fa0, fa0, fa6) ETI_FSUB_PI(fa0, fa0, fa7) ETI_FAND_PI(fa3, fa1, fa6)
                  ETI_FSUB_PI(fa3, fa3, fa7) ETI_FSRLI_PI(fa1, fa1, 4) ETI_FAND_PI(fa1, fa1, fa6)
                      ETI_FSUB_PI(fa1, fa1, fa7) ETI_FGB(ft3, ft8, q) ETI_FMUL_PI(ft1, fa2, ft3) ETI_FGB(ft3, ft9, q)
                          ETI_FMUL_PI(ft2, fa3, ft3) ETI_FADD_PI(ft1, ft1, ft2) ETI_FGB(ft3, ft10, q)
                              ETI_FMUL_PI(ft2, fa0, ft3) ETI_FADD_PI(ft1, ft1, ft2) ETI_FGB(ft3, ft11, q)
                                  ETI_FMUL_PI(ft2, fa1, ft3) ETI_FADD_PI(ft1, ft1, ft2) ETI_FCVT_PS_PW(ft1, ft1)
                                      ETI_FGH(ft2, ft7, w) ETI_FCVT_PS_F16(ft2, ft2) ETI_FBC(ft3, 0, d)
                                          ETI_FMUL(ft2, ft2, ft3) ETI_FMADD(ft0, ft2, ft1, ft0)
                                              "addi %[w], %[w], 18\n\taddi %[q], %[q], 32\n\t"
                                              "addi %[d], %[d], 4\n\taddi %[n], %[n], -1\n\t"
                                              "bnez %[n], 1b\n\t" MM_HSUM_FT0
      : [w] "+r"(w), [q] "+r"(xq), [d] "+r"(xd), [n] "+r"(n), [r] "=f"(r), [t] "=&r"(t)
      : [z] "r"(0), [o] "r"(k_off8), [m] "r"(k_nib)
      : MM_CLOBBERS);
  return r;
}

/* Integer dots of one Q4_K quant group (32 bytes of nibbles at qs) with two 32-blocks of x
 * quants: lo nibbles . xq[0..31] -> *lo, hi nibbles . xq[32..63] -> *hi (exact, as floats). */
static void dot_q4_k_pair(const uint8_t* qs, const int8_t* xq, float* lo, float* hi) {
  int64_t t;
  const int8_t* xh = xq + 32;
  __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o) ETI_FLW(ft11, 96, o) ETI_FBC(fa6, 0, m)
                       ETI_FGB(fa0, ft8, w) ETI_FGB(fa1, ft9, w) ETI_FGB(fa2, ft10, w) ETI_FGB(fa3, ft11, w)
                   /* lo nibbles x xq[0..31] */
                   ETI_FAND_PI(ft1, fa0, fa6) ETI_FGB(ft3, ft8, q) ETI_FMUL_PI(ft0, ft1, ft3) ETI_FAND_PI(ft1, fa1, fa6)
                       ETI_FGB(ft3, ft9, q) ETI_FMUL_PI(ft1, ft1, ft3) ETI_FADD_PI(ft0, ft0, ft1)
                           ETI_FAND_PI(ft1, fa2, fa6) ETI_FGB(ft3, ft10, q) ETI_FMUL_PI(ft1, ft1, ft3)
                               ETI_FADD_PI(ft0, ft0, ft1) ETI_FAND_PI(ft1, fa3, fa6) ETI_FGB(ft3, ft11, q)
                                   ETI_FMUL_PI(ft1, ft1, ft3) ETI_FADD_PI(ft0, ft0, ft1) ETI_FCVT_PS_PW(ft0, ft0)
                                       ETI_HSUM8(ft2, ft0, ft1, t) "fmv.s %[lo], ft2\n\t"
                   /* hi nibbles x xq[32..63] */
                   ETI_FSRLI_PI(ft1, fa0, 4) ETI_FAND_PI(ft1, ft1, fa6) ETI_FGB(ft3, ft8, h) ETI_FMUL_PI(ft0, ft1, ft3)
                       ETI_FSRLI_PI(ft1, fa1, 4) ETI_FAND_PI(ft1, ft1, fa6) ETI_FGB(ft3, ft9, h)
                           ETI_FMUL_PI(ft1, ft1, ft3) ETI_FADD_PI(ft0, ft0, ft1) ETI_FSRLI_PI(ft1, fa2, 4)
                               ETI_FAND_PI(ft1, ft1, fa6) ETI_FGB(ft3, ft10, h) ETI_FMUL_PI(ft1, ft1, ft3)
                                   ETI_FADD_PI(ft0, ft0, ft1) ETI_FSRLI_PI(ft1, fa3, 4) ETI_FAND_PI(ft1, ft1, fa6)
                                       ETI_FGB(ft3, ft11, h) ETI_FMUL_PI(ft1, ft1, ft3) ETI_FADD_PI(ft0, ft0, ft1)
                                           ETI_FCVT_PS_PW(ft0, ft0) ETI_HSUM8(ft2, ft0, ft1, t) "fmv.s %[hi], ft2\n\t"
                   : [lo] "=&f"(*lo), [hi] "=&f"(*hi), [t] "=&r"(t)
                   : [w] "r"(qs), [q] "r"(xq), [h] "r"(xh), [o] "r"(k_off8), [m] "r"(k_nib)
                   : MM_CLOBBERS);
}

static float fabs_bits(float x) { return et_bits_f32(et_f32_bits(x) & 0x7fffffffu); }

/* Round half to even of a float in [-2^22, 2^22] (magic-number addition). */
static int32_t round_even(float x) {
  const float magic = 12582912.0f;
  return (int32_t)(et_f32_bits(x + magic) - et_f32_bits(magic));
}

/* Q8_0 activation row: q[K], d[K/32] (d rounded through f16, as the CPU's quantizer stores it).
 * Per 32-block: amax in 8 lanes (|x| by clearing the sign bit, fmax.ps, then across the lanes),
 * q = round-to-nearest-even(x * 127/amax) (fcvt.pw.ps) scattered as bytes (fscb.ps). */
static const uint32_t k_absmask = 0x7fffffffu;

static float block_amax(const float* x) {
  float r;
  int64_t t;
  __asm__ volatile(ETI_FBC(ft7, 0, m) ETI_FLW(ft0, 0, x) ETI_FAND_PI(ft0, ft0, ft7) ETI_FLW(ft1, 32, x)
                       ETI_FAND_PI(ft1, ft1, ft7) ETI_FMAX(ft0, ft0, ft1) ETI_FLW(ft1, 64, x) ETI_FAND_PI(ft1, ft1, ft7)
                           ETI_FMAX(ft0, ft0, ft1) ETI_FLW(ft1, 96, x) ETI_FAND_PI(ft1, ft1, ft7) ETI_FMAX(ft0, ft0, ft1)
                               ETI_FSWIZZ_SWAP1(ft1, ft0) ETI_FMAX(ft0, ft0, ft1) ETI_FSWIZZ_SWAP2(ft1, ft0)
                                   ETI_FMAX(ft0, ft0, ft1) ETI_FMVS_X(t, ft0, 4) "fmv.w.x ft1, %[t]\n\t"
                                                                                "fmax.s %[r], ft0, ft1\n\t"
                   : [r] "=f"(r), [t] "=&r"(t)
                   : [x] "r"(x), [m] "r"(&k_absmask)
                   : "ft0", "ft1", "ft7", "memory");
  return r;
}

/* q[off[k]] = round-half-even(x[k] * id) for the 32 values of a block (fscb.ps scatters by the
 * byte offsets off[0..31]: k_off8 stores them in order, k_panel_off into a TensorFMA B panel). */
static void block_round_store(int8_t* q, const float* x, float id, const int32_t* off) {
  __asm__ volatile(ETI_FBC(ft7, 0, i) ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o) ETI_FLW(ft11, 96, o)
                       ETI_FLW(ft0, 0, x) ETI_FMUL(ft0, ft0, ft7) ETI_FCVT_PW_PS_RNE(ft0, ft0) ETI_FSCB(ft0, ft8, q)
                           ETI_FLW(ft0, 32, x) ETI_FMUL(ft0, ft0, ft7) ETI_FCVT_PW_PS_RNE(ft0, ft0)
                               ETI_FSCB(ft0, ft9, q) ETI_FLW(ft0, 64, x) ETI_FMUL(ft0, ft0, ft7)
                                   ETI_FCVT_PW_PS_RNE(ft0, ft0) ETI_FSCB(ft0, ft10, q) ETI_FLW(ft0, 96, x)
                                       ETI_FMUL(ft0, ft0, ft7) ETI_FCVT_PW_PS_RNE(ft0, ft0) ETI_FSCB(ft0, ft11, q)
                   :
                   : [x] "r"(x), [q] "r"(q), [i] "r"(&id), [o] "r"(off)
                   : "ft0", "ft7", "ft8", "ft9", "ft10", "ft11", "memory");
}

/* One Q8_0 block of 32 activations: the quants to q at the offsets off (block_round_store),
 * returns the block's scale d (amax / 127 rounded through f16, as the CPU's quantizer stores it). */
static float quantize_block_q8_0(int8_t* q, const float* x, const int32_t* off) {
  const float amax = block_amax(x);
  const float id = amax != 0.0f ? et_divf(127.0f, amax) : 0.0f;
  block_round_store(q, x, id, off);
  return et_f16_to_f32(et_f32_to_f16(et_divf(amax, 127.0f)));
}

static void quantize_q8_0(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t b = 0; b < k / 32; ++b) d[b] = quantize_block_q8_0(q + 32 * b, x + 32 * b, k_off8);
}

/* Q8_K activation row: q[K], d[K/256], xsum[K/32] (sum of each 32 quants). */
static void quantize_q8_k(const float* x, int64_t k, int8_t* q, float* d, float* xsum) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float amax = 0.0f, mx = 0.0f;
    for (int i = 0; i < 256; ++i) {
      float a = fabs_bits(xb[i]);
      if (a > amax) {
        amax = a;
        mx = xb[i];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0.0f;
      for (int i = 0; i < 256; ++i) q[256 * b + i] = 0;
      for (int j = 0; j < 8; ++j) xsum[8 * b + j] = 0.0f;
      continue;
    }
    float iscale = et_divf(-127.0f, mx);
    for (int j = 0; j < 8; ++j) {
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) {
        int32_t v = round_even(iscale * xb[32 * j + i]);
        if (v > 127) v = 127;
        q[256 * b + 32 * j + i] = (int8_t)v;
        s += v;
      }
      xsum[8 * b + j] = (float)s;
    }
    d[b] = et_recipf(iscale);
  }
}

static void scale_min_k4(int j, const uint8_t* q, float* sc, float* m) {
  if (j < 4) {
    *sc = (float)(q[j] & 63);
    *m = (float)(q[j + 4] & 63);
  } else {
    *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

static float dot_q4_k(const uint8_t* w, const int8_t* xq, const float* xd, const float* xsum, int64_t k) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b, w += 144) {
    const float d = et_f16_to_f32((uint16_t)(w[0] | (w[1] << 8)));
    const float dmin = et_f16_to_f32((uint16_t)(w[2] | (w[3] << 8)));
    const uint8_t* scales = w + 4;
    const uint8_t* qs = w + 16;
    float sumb = 0.0f;
    for (int p = 0; p < 4; ++p) {
      float lo, hi, sc0, m0, sc1, m1;
      dot_q4_k_pair(qs + 32 * p, xq + 256 * b + 64 * p, &lo, &hi);
      scale_min_k4(2 * p, scales, &sc0, &m0);
      scale_min_k4(2 * p + 1, scales, &sc1, &m1);
      sumb += d * sc0 * lo - dmin * m0 * xsum[8 * b + 2 * p];
      sumb += d * sc1 * hi - dmin * m1 * xsum[8 * b + 2 * p + 1];
    }
    acc += xd[b] * sumb;
  }
  return acc;
}

/* Q6_K weights x activations already dequantized from Q8_K (xf: K floats). */
static float dot_q6_k(const uint8_t* w, const float* xf, int64_t k) {
  float wf[256] __attribute__((aligned(32)));
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b, w += 210) {
    et_dequant_q6_k_block(w, wf);
    acc += dot_f32(wf, xf + 256 * b, 256);
  }
  return acc;
}

/* Q8_K rounding of an activation row into floats (d * q per 256-block), via quantize_q8_k. */
static void round_q8_k(const float* x, int64_t k, float* out, int8_t* q, float* d, float* xsum) {
  quantize_q8_k(x, k, q, d, xsum);
  for (int64_t i = 0; i < k; ++i) out[i] = d[i / 256] * (float)q[i];
}

static int64_t mul_mat_rows(const EtMulMatArgs* p, uint32_t want, uint8_t* scratch);

static int64_t mul_mat(const void* args, uint32_t want) {
  const EtMulMatArgs* p = (const EtMulMatArgs*)args;
  const EtTensor *w = &p->w, *x = &p->x, *d = &p->dst;
  if (w->type != want) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (x->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  const int64_t K = w->ne[0], N = w->ne[1], T = x->ne[1];
  const int64_t kb = (want == ET_TYPE_Q4_K || want == ET_TYPE_Q6_K) ? 256
                     : (want == ET_TYPE_F32 || want == ET_TYPE_F16) ? 8
                                                                    : 32;
  if (K % kb != 0 || K > 16384 || x->ne[0] != K) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (d->ne[0] != N || d->ne[1] != T || d->ne[2] != x->ne[2] || d->ne[3] != x->ne[3])
    return et_fail(ET_STATUS_BAD_SHAPE, 2);
  if (w->ne[2] <= 0 || w->ne[3] <= 0 || x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0)
    return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (x->nb[0] != 4 || d->nb[0] != 4 || (x->addr | x->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 1);
  const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];

  /* Stack scratch for quantized activation rows. */
  uint8_t scratch[ET_MM_SCRATCH] __attribute__((aligned(64)));
  const int quant = want == ET_TYPE_Q8_0 || want == ET_TYPE_Q4_0 || want == ET_TYPE_Q4_K || want == ET_TYPE_Q6_K;
  const int64_t row_scratch = want == ET_TYPE_Q6_K   ? 5 * K + 4 * (K / 256) + 4 * (K / 32)
                              : want == ET_TYPE_Q4_K ? K + 4 * (K / 256) + 4 * (K / 32)
                                                     : K + 4 * (K / 32);
  const int64_t row_stride = (row_scratch + 63) / 64 * 64;
  int64_t chunk = quant ? ET_MM_SCRATCH / row_stride : T;
  if (chunk > ET_MM_MAX_CHUNK) chunk = ET_MM_MAX_CHUNK;
  if (chunk < 1) return et_fail(ET_STATUS_BAD_SHAPE, 0);

  if (N % 16 != 0 && T * x->ne[2] * x->ne[3] > 1) return mul_mat_rows(p, want, scratch);

  int64_t n0, n1;
  et_split(et_spmd(&p->h), N, 16, &n0, &n1);
  if (n0 >= n1) return ET_STATUS_OK;
  for (int64_t i3 = 0; i3 < x->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < x->ne[2]; ++i2) {
      const uint8_t* wb = (const uint8_t*)(uintptr_t)w->addr + (i2 / r2) * w->nb[2] + (i3 / r3) * w->nb[3];
      const uint8_t* xb = (const uint8_t*)(uintptr_t)x->addr + i2 * x->nb[2] + i3 * x->nb[3];
      uint8_t* db = (uint8_t*)(uintptr_t)d->addr + i2 * d->nb[2] + i3 * d->nb[3];
      for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t t1 = t0 + chunk < T ? t0 + chunk : T;
        for (int64_t t = t0; quant && t < t1; ++t) {
          int8_t* q = (int8_t*)(scratch + (t - t0) * row_stride);
          float* sd = (float*)(scratch + (t - t0) * row_stride + K);
          const float* xr = (const float*)(xb + t * x->nb[1]);
          if (want == ET_TYPE_Q6_K)
            round_q8_k(xr, K, (float*)q, (int8_t*)q + 4 * K, (float*)((int8_t*)q + 5 * K),
                       (float*)((int8_t*)q + 5 * K) + K / 256);
          else if (want == ET_TYPE_Q4_K) quantize_q8_k(xr, K, q, sd, sd + K / 256);
          else quantize_q8_0(xr, K, q, sd);
        }
        for (int64_t n = n0; n < n1 && want == ET_TYPE_Q6_K; ++n) {
          /* Q6_K: each weight super-block dequantized once for all activation rows of the chunk */
          float acc[ET_MM_MAX_CHUNK], wf[256] __attribute__((aligned(32)));
          const uint8_t* wr = wb + n * w->nb[1];
          for (int64_t t = t0; t < t1; ++t) acc[t - t0] = 0.0f;
          for (int64_t b = 0; b < K / 256; ++b) {
            et_dequant_q6_k_block(wr + 210 * b, wf);
            for (int64_t t = t0; t < t1; ++t)
              acc[t - t0] += dot_f32(wf, (const float*)(scratch + (t - t0) * row_stride) + 256 * b, 256);
          }
          for (int64_t t = t0; t < t1; ++t) ((float*)(db + t * d->nb[1]))[n] = acc[t - t0];
        }
        for (int64_t n = n0; n < n1 && want != ET_TYPE_Q6_K; ++n) {
          const uint8_t* wr = wb + n * w->nb[1];
          for (int64_t t = t0; t < t1; ++t) {
            const float* xr = (const float*)(xb + t * x->nb[1]);
            const int8_t* q = (const int8_t*)(scratch + (t - t0) * row_stride);
            const float* sd = (const float*)(scratch + (t - t0) * row_stride + K);
            float v;
            switch (want) {
              case ET_TYPE_F32: v = dot_f32((const float*)wr, xr, K); break;
              case ET_TYPE_F16: v = dot_f16((const uint16_t*)wr, xr, K); break;
              case ET_TYPE_Q8_0: v = dot_q8_0(wr, q, sd, K); break;
              case ET_TYPE_Q4_0: v = dot_q4_0(wr, q, sd, K); break;
              case ET_TYPE_Q6_K: v = dot_q6_k(wr, (const float*)q, K); break;
              default: v = dot_q4_k(wr, q, sd, sd + K / 256, K); break;
            }
            ((float*)(db + t * d->nb[1]))[n] = v;
          }
        }
      }
    }
  return ET_STATUS_OK;
}

static float dot_row(uint32_t want, const uint8_t* wr, const float* xr, const uint8_t* scratch, int64_t K) {
  const int8_t* q = (const int8_t*)scratch;
  const float* sd = (const float*)(scratch + K);
  switch (want) {
    case ET_TYPE_F32: return dot_f32((const float*)wr, xr, K);
    case ET_TYPE_F16: return dot_f16((const uint16_t*)wr, xr, K);
    case ET_TYPE_Q8_0: return dot_q8_0(wr, q, sd, K);
    case ET_TYPE_Q4_0: return dot_q4_0(wr, q, sd, K);
    case ET_TYPE_Q6_K: return dot_q6_k(wr, (const float*)scratch, K);
    default: return dot_q4_k(wr, q, sd, sd + K / 256, K);
  }
}

/* One activation row quantized as dot_row reads it (Q8_0, Q8_K, or Q8_K-rounded floats for Q6_K;
 * nothing for F32 / F16). The scratch needs 5 * K + 4 * (K / 32) + 4 * (K / 256) bytes. */
static void quantize_row(uint32_t want, const float* xr, int64_t K, uint8_t* scratch) {
  if (want == ET_TYPE_Q6_K)
    round_q8_k(xr, K, (float*)scratch, (int8_t*)scratch + 4 * K, (float*)(scratch + 5 * K),
               (float*)(scratch + 5 * K) + K / 256);
  else if (want == ET_TYPE_Q4_K)
    quantize_q8_k(xr, K, (int8_t*)scratch, (float*)(scratch + K), (float*)(scratch + K) + K / 256);
  else if (want == ET_TYPE_Q8_0 || want == ET_TYPE_Q4_0) quantize_q8_0(xr, K, (int8_t*)scratch, (float*)(scratch + K));
}

/* MUL_MAT with N % 16 != 0 and more than one dst row (e.g. a MoE router, N = the expert count):
 * rows of N floats do not end on 64-byte lines, so splitting N would let two minions write one
 * line. The harts split the dst rows instead, in groups of g rows with g * N a multiple of 16
 * (whole lines per group; dst contiguous and line-aligned), each hart computing all N dots of
 * its rows (the weights are re-read per row: cheap for the small N this path is for). */
static int64_t mul_mat_rows(const EtMulMatArgs* p, uint32_t want, uint8_t* scratch) {
  const EtTensor *w = &p->w, *x = &p->x, *d = &p->dst;
  const int64_t K = w->ne[0], N = w->ne[1], T = x->ne[1], B2 = x->ne[2], B3 = x->ne[3];
  const int64_t r2 = B2 / w->ne[2], r3 = B3 / w->ne[3];
  if (d->nb[1] != (uint64_t)(4 * N) || d->nb[2] != d->nb[1] * (uint64_t)T || d->nb[3] != d->nb[2] * (uint64_t)B2 ||
      d->addr % 64 != 0)
    return et_fail(ET_STATUS_BAD_SHAPE, 2);
  if (5 * K + 4 * (K / 32) + 4 * (K / 256) > ET_MM_SCRATCH) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  int64_t g = 1, r0, r1;
  while ((g * N) % 16 != 0) ++g;
  et_split(et_spmd(&p->h), T * B2 * B3, g, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r % T, i2 = (r / T) % B2, i3 = r / (T * B2);
    const uint8_t* wb = (const uint8_t*)(uintptr_t)w->addr + (i2 / r2) * w->nb[2] + (i3 / r3) * w->nb[3];
    const float* xr = (const float*)(uintptr_t)(x->addr + t * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
    float* out = (float*)(uintptr_t)d->addr + r * N;
    quantize_row(want, xr, K, scratch);
    for (int64_t n = 0; n < N; ++n) out[n] = dot_row(want, wb + n * w->nb[1], xr, scratch, K);
  }
  return ET_STATUS_OK;
}

static int64_t mul_mat_id(const void* args, uint32_t want) {
  const EtMulMatIdArgs* p = (const EtMulMatIdArgs*)args;
  const EtTensor *w = &p->w, *x = &p->x, *ids = &p->ids, *d = &p->dst;
  if (w->type != want) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (x->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (ids->type != ET_TYPE_I32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 3);
  const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], n_used = ids->ne[0], T = ids->ne[1], S = x->ne[1];
  const int64_t kb = (want == ET_TYPE_Q4_K || want == ET_TYPE_Q6_K) ? 256
                     : (want == ET_TYPE_F32 || want == ET_TYPE_F16) ? 8
                                                                    : 32;
  if (K % kb != 0 || K > 16384 || x->ne[0] != K || x->ne[2] != T || S <= 0) return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (d->ne[0] != N || d->ne[1] != n_used || d->ne[2] != T) return et_fail(ET_STATUS_BAD_SHAPE, 3);
  if (x->nb[0] != 4 || d->nb[0] != 4 || (x->addr | x->nb[1] | x->nb[2]) % 32 != 0)
    return et_fail(ET_STATUS_BAD_ALIGN, 1);
  uint8_t scratch[ET_MM_SCRATCH] __attribute__((aligned(64)));
  if (5 * K + 4 * (K / 32) + 4 * (K / 256) > ET_MM_SCRATCH) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  /* (slot, token) pairs p0..p1 x outputs n0..n1: N split in 16s, or (N % 16 != 0, as mul_mat_rows)
   * the pairs split in groups that fill whole lines of the contiguous dst. */
  int64_t n0 = 0, n1 = N, p0 = 0, p1 = n_used * T;
  if (N % 16 != 0 && n_used * T > 1) {
    if (d->nb[1] != (uint64_t)(4 * N) || d->nb[2] != d->nb[1] * (uint64_t)n_used || d->addr % 64 != 0)
      return et_fail(ET_STATUS_BAD_SHAPE, 3);
    int64_t g = 1;
    while ((g * N) % 16 != 0) ++g;
    et_split(et_spmd(&p->h), n_used * T, g, &p0, &p1);
  } else {
    et_split(et_spmd(&p->h), N, 16, &n0, &n1);
  }
  if (n0 >= n1 || p0 >= p1) return ET_STATUS_OK;
  for (int64_t pr = p0; pr < p1; ++pr) {
    const int64_t t = pr / n_used, j = pr % n_used;
    const int32_t e = *(const int32_t*)(uintptr_t)(ids->addr + j * ids->nb[0] + t * ids->nb[1]);
    float* out = (float*)(uintptr_t)(d->addr + j * d->nb[1] + t * d->nb[2]);
    if (e < 0 || e >= E) {
      for (int64_t n = n0; n < n1; ++n) out[n] = 0.0f;
      continue;
    }
    const float* xr = (const float*)(uintptr_t)(x->addr + (j % S) * x->nb[1] + t * x->nb[2]);
    quantize_row(want, xr, K, scratch);
    const uint8_t* we = (const uint8_t*)(uintptr_t)w->addr + (uint64_t)e * w->nb[2];
    for (int64_t n = n0; n < n1; ++n) out[n] = dot_row(want, we + n * w->nb[1], xr, scratch, K);
  }
  return ET_STATUS_OK;
}

static int64_t mul_mat_f32(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_F32);
}
static int64_t mul_mat_f16(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_F16);
}
static int64_t mul_mat_q8_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_Q8_0);
}
static int64_t mul_mat_q4_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_Q4_0);
}
static int64_t mul_mat_q4_k(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_Q4_K);
}
ET_KERNEL(ET_K_MUL_MAT_F32, mul_mat_f32);
ET_KERNEL(ET_K_MUL_MAT_F16, mul_mat_f16);
ET_KERNEL(ET_K_MUL_MAT_Q8_0, mul_mat_q8_0);
ET_KERNEL(ET_K_MUL_MAT_Q4_0, mul_mat_q4_0);
ET_KERNEL(ET_K_MUL_MAT_Q4_K, mul_mat_q4_k);

static int64_t mul_mat_id_f32(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_F32);
}
static int64_t mul_mat_id_f16(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_F16);
}
static int64_t mul_mat_id_q8_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_Q8_0);
}
static int64_t mul_mat_id_q4_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_Q4_0);
}
static int64_t mul_mat_id_q4_k(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_Q4_K);
}
ET_KERNEL(ET_K_MUL_MAT_ID_F32, mul_mat_id_f32);
ET_KERNEL(ET_K_MUL_MAT_ID_F16, mul_mat_id_f16);
ET_KERNEL(ET_K_MUL_MAT_ID_Q8_0, mul_mat_id_q8_0);
ET_KERNEL(ET_K_MUL_MAT_ID_Q4_0, mul_mat_id_q4_0);
ET_KERNEL(ET_K_MUL_MAT_ID_Q4_K, mul_mat_id_q4_k);

static int64_t mul_mat_q6_k(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat(a, ET_TYPE_Q6_K);
}
static int64_t mul_mat_id_q6_k(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_id(a, ET_TYPE_Q6_K);
}
ET_KERNEL(ET_K_MUL_MAT_Q6_K, mul_mat_q6_k);
ET_KERNEL(ET_K_MUL_MAT_ID_Q6_K, mul_mat_id_q6_k);

/* ---- MUL_MAT through the tensor unit (prompt-sized batches; Q8_0 / Q4_0 weights) ------------
 * dst[n, t] = sum_b d_w[n, b] * d_x[t, b] * isum(n, t, b), isum the exact int32 dot of the block's
 * int8 weight quants (Q4_0: nibble - 8) with the Q8_0 activation quants (made as quantize_q8_0
 * makes them), the block scales applied in fp32 per block and summed over b in block order.
 * Only the even hart of each minion works (it alone may issue tensor instructions); the minions
 * split the work items (batch, 16 activation rows, 16 weight rows) in contiguous ranges (each
 * item owns 16 whole 64-byte dst lines, so no two minions write one line). Per (16 activation
 * rows, K chunk of KC blocks) the hart quantizes x into a B panel on its stack in the TensorFMA B layout
 * (per block 8 lines, line g holding activation row j's quants 4g..4g+3 at bytes 4j..4j+3; rows
 * past the batch zero) plus the scales d_x[b][j]; then per 16 weight rows n0..n0+15 and block
 * pair: the two blocks' int8 weight quants of the 16 rows are staged into 16 lines (block b at
 * bytes 0..31, b+1 at 32..63; Q8_0 copied by halfword gathers / scatters, Q4_0 unpacked),
 * TensorLoad puts them in SCP lines 0-15 and the pair's 16 panel lines in SCP lines 16-31 (the
 * stack lines evicted to L2 first: TensorLoad reads past the L1, the checker's rule), and
 * per block one int8 TensorFMA (16 x 16 x 32) gives the int32 tile C[n][t] in f0-f31, stored to
 * the stack; acc[n][t] += float(C) * d_w[n] * d_x[t] (8 lanes). The 16 x 16 acc tile is written
 * (added after the first K chunk) to dst transposed, one dst row at a time by word gathers.
 * Needs the launch's L1 scratchpad (LaunchRequest.scratchpad; else ET_STATUS_TENSOR_ERROR), N %
 * 16 == 0, K % 32 == 0, dst rows line-aligned. */
#define ET_TU_KC 64 /* blocks per K chunk: the B panel is ET_TU_KC * (512 + 64) bytes of stack */

/* Byte k of a 32-block of activation row j goes to panel block line k / 4, byte 4j + k % 4. */
static const int32_t k_panel_off[32] = {0,   1,   2,   3,   64,  65,  66,  67,  128, 129, 130, 131, 192, 193, 194, 195,
                                        256, 257, 258, 259, 320, 321, 322, 323, 384, 385, 386, 387, 448, 449, 450, 451};
static const int32_t k_off_h[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};

/* The 32 int8 quants of one weight block into 32 staged bytes at s: Q8_0 (qs at w + 2, halfword
 * aligned) by two halfword gathers and scatters; Q4_0 (16 bytes of nibbles at w + 2) unpacked to
 * lo - 8 (k 0..15) and hi - 8 (k 16..31). */
static void stage_block(uint32_t want, const uint8_t* w, int8_t* s) {
  const uint8_t* q = w + 2;
  if (want == ET_TYPE_Q8_0) {
    __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FGH(ft0, ft8, q) ETI_FGH(ft1, ft9, q)
                         ETI_FSCH(ft0, ft8, s) ETI_FSCH(ft1, ft9, s)
                     :
                     : [q] "r"(q), [s] "r"(s), [o] "r"(k_off_h)
                     : "ft0", "ft1", "ft8", "ft9", "memory");
  } else {
    const int8_t* s2 = s + 16;
    __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FBC(fa6, 0, m) ETI_FBC(fa7, 4, m) ETI_FGB(ft0, ft8, q)
                         ETI_FGB(ft1, ft9, q) ETI_FAND_PI(ft2, ft0, fa6) ETI_FSUB_PI(ft2, ft2, fa7)
                             ETI_FSCB(ft2, ft8, s) ETI_FAND_PI(ft2, ft1, fa6) ETI_FSUB_PI(ft2, ft2, fa7)
                                 ETI_FSCB(ft2, ft9, s) ETI_FSRLI_PI(ft0, ft0, 4) ETI_FAND_PI(ft0, ft0, fa6)
                                     ETI_FSUB_PI(ft0, ft0, fa7) ETI_FSCB(ft0, ft8, h) ETI_FSRLI_PI(ft1, ft1, 4)
                                         ETI_FAND_PI(ft1, ft1, fa6) ETI_FSUB_PI(ft1, ft1, fa7) ETI_FSCB(ft1, ft9, h)
                     :
                     : [q] "r"(q), [s] "r"(s), [h] "r"(s2), [o] "r"(k_off8), [m] "r"(k_nib)
                     : "ft0", "ft1", "ft2", "ft8", "ft9", "fa6", "fa7", "memory");
  }
}

/* acc[i][0..15] += float(c[i][0..15]) * dw[i] * dx[0..15] for the 16 rows of a tile. */
static void tile_scale_acc(float* acc, const int32_t* c, const float* dw, const float* dx) {
  int64_t n = 16;
  __asm__ volatile(ETI_FLW(ft8, 0, x) ETI_FLW(ft9, 32, x) "1:\n\t" ETI_FLW(ft0, 0, c) ETI_FLW(ft1, 32, c)
                       ETI_FCVT_PS_PW(ft0, ft0) ETI_FCVT_PS_PW(ft1, ft1) ETI_FMUL(ft0, ft0, ft8) ETI_FMUL(ft1, ft1, ft9)
                           ETI_FBC(ft2, 0, w) ETI_FLW(ft3, 0, a) ETI_FLW(ft4, 32, a) ETI_FMADD(ft3, ft0, ft2, ft3)
                               ETI_FMADD(ft4, ft1, ft2, ft4) ETI_FSW(ft3, 0, a) ETI_FSW(ft4, 32, a)
                   "addi %[c], %[c], 64\n\taddi %[a], %[a], 64\n\taddi %[w], %[w], 4\n\t"
                   "addi %[n], %[n], -1\n\tbnez %[n], 1b\n\t"
                   : [c] "+r"(c), [a] "+r"(acc), [w] "+r"(dw), [n] "+r"(n)
                   : [x] "r"(dx)
                   : "ft0", "ft1", "ft2", "ft3", "ft4", "ft8", "ft9", "memory");
}

/* dw[0..15] = the f16 scales at base + off[i] (the block's d of 16 weight rows), as floats. */
static void gather_scales(float* dw, const uint8_t* base, const int32_t* off) {
  __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FGH(ft0, ft8, b) ETI_FGH(ft1, ft9, b)
                       ETI_FCVT_PS_F16(ft0, ft0) ETI_FCVT_PS_F16(ft1, ft1) ETI_FSW(ft0, 0, d) ETI_FSW(ft1, 32, d)
                   :
                   : [b] "r"(base), [d] "r"(dw), [o] "r"(off)
                   : "ft0", "ft1", "ft8", "ft9", "memory");
}

/* dst row: out[0..15] (+)= acc[0..15][j] (column j of the tile, by word gathers). */
static const int32_t k_col_off[16] = {0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960};
static void tile_column_out(float* out, const float* acc_col, int add) {
  if (add)
    __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FGW(ft0, ft8, a) ETI_FGW(ft1, ft9, a) ETI_FLW(ft2, 0, d)
                         ETI_FLW(ft3, 32, d) ETI_FADD(ft0, ft0, ft2) ETI_FADD(ft1, ft1, ft3) ETI_FSW(ft0, 0, d)
                             ETI_FSW(ft1, 32, d)
                     :
                     : [a] "r"(acc_col), [d] "r"(out), [o] "r"(k_col_off)
                     : "ft0", "ft1", "ft2", "ft3", "ft8", "ft9", "memory");
  else
    __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FGW(ft0, ft8, a) ETI_FGW(ft1, ft9, a) ETI_FSW(ft0, 0, d)
                         ETI_FSW(ft1, 32, d)
                     :
                     : [a] "r"(acc_col), [d] "r"(out), [o] "r"(k_col_off)
                     : "ft0", "ft1", "ft8", "ft9", "memory");
}

/* The shape and type checks both tensor-unit kernels make (ET_STATUS_OK or the failure). */
static int64_t tensor_check(const EtMulMatArgs* p, uint32_t want) {
  const EtTensor *w = &p->w, *x = &p->x, *d = &p->dst;
  if (w->type != want) return et_fail(ET_STATUS_BAD_TYPE, 0);
  if (x->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 1);
  if (d->type != ET_TYPE_F32) return et_fail(ET_STATUS_BAD_TYPE, 2);
  const int64_t K = w->ne[0], N = w->ne[1], T = x->ne[1];
  if (K % 32 != 0 || x->ne[0] != K || N % 16 != 0) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  if (d->ne[0] != N || d->ne[1] != T || d->ne[2] != x->ne[2] || d->ne[3] != x->ne[3])
    return et_fail(ET_STATUS_BAD_SHAPE, 2);
  if (w->ne[2] <= 0 || w->ne[3] <= 0 || x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0)
    return et_fail(ET_STATUS_BAD_SHAPE, 1);
  if (x->nb[0] != 4 || (x->addr | x->nb[1]) % 32 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 1);
  if (d->nb[0] != 4 || (d->addr | d->nb[1] | d->nb[2] | d->nb[3]) % 64 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 2);
  if (w->nb[1] * 15 > 0x7fffffffull) return et_fail(ET_STATUS_BAD_SHAPE, 0);
  return ET_STATUS_OK;
}

/* This minion's work items [*i0, *i1): (batch, 16-row activation chunk, 16 weight rows), a
 * contiguous range per minion, worked by its even hart only (0: nothing to do here). */
static int tensor_items(const EtMulMatArgs* p, int64_t* i0, int64_t* i1) {
  const EtSpmd s = et_spmd(&p->h);
  const uint32_t th = p->h.threads == 2 ? 2 : 1;
  if (s.rank % th != 0) return 0;
  const EtSpmd unit = {s.rank / th, s.n / th};
  const int64_t NT = p->w.ne[1] / 16, MC = (p->x.ne[1] + 15) / 16;
  et_split(unit, p->x.ne[3] * p->x.ne[2] * MC * NT, 1, i0, i1);
  return *i0 < *i1;
}

static int64_t mul_mat_tensor(const void* args, uint32_t want) {
  const EtMulMatArgs* p = (const EtMulMatArgs*)args;
  const EtTensor *w = &p->w, *x = &p->x, *d = &p->dst;
  const int64_t bad = tensor_check(p, want);
  if (bad != ET_STATUS_OK) return bad;
  const int64_t K = w->ne[0], N = w->ne[1], T = x->ne[1];
  const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
  const int64_t NT = N / 16, MC = (T + 15) / 16, B2 = x->ne[2];
  int64_t i0, i1;
  if (!tensor_items(p, &i0, &i1)) return ET_STATUS_OK;

  uint8_t panel[ET_TU_KC * 512] __attribute__((aligned(64)));
  float pd[ET_TU_KC * 16] __attribute__((aligned(64)));
  int8_t stage[16 * 64] __attribute__((aligned(64)));
  int32_t ctile[256] __attribute__((aligned(64)));
  float acc[256] __attribute__((aligned(64)));
  float dw[16] __attribute__((aligned(64)));
  int32_t row_off[16] __attribute__((aligned(64)));
  const int64_t nblk = K / 32, wblk = want == ET_TYPE_Q8_0 ? 34 : 18;
  for (int i = 0; i < 16; ++i) row_off[i] = (int32_t)(i * w->nb[1]);

  for (int64_t item = i0; item < i1;) {
    const int64_t bm = item / NT, nt0 = item % NT, nt1 = NT < nt0 + (i1 - item) ? NT : nt0 + (i1 - item);
    const int64_t i3 = bm / (B2 * MC), i2 = (bm / MC) % B2, t0 = (bm % MC) * 16;
    item += nt1 - nt0;
    const uint8_t* wb = (const uint8_t*)(uintptr_t)w->addr + (i2 / r2) * w->nb[2] + (i3 / r3) * w->nb[3];
    const uint8_t* xb = (const uint8_t*)(uintptr_t)x->addr + i2 * x->nb[2] + i3 * x->nb[3];
    uint8_t* db = (uint8_t*)(uintptr_t)d->addr + i2 * d->nb[2] + i3 * d->nb[3];
    const int64_t tm = T - t0 < 16 ? T - t0 : 16;
    for (int64_t kb0 = 0; kb0 < nblk; kb0 += ET_TU_KC) {
      const int64_t kc = nblk - kb0 < ET_TU_KC ? nblk - kb0 : ET_TU_KC;
      /* B panel: the chunk's blocks of activation rows t0..t0+tm-1, zero columns past tm */
      for (int64_t j = 0; j < 16; ++j)
        for (int64_t b = 0; b < kc; ++b) {
          int8_t* q = (int8_t*)panel + b * 512 + j * 4;
          if (j >= tm) {
            for (int g = 0; g < 8; ++g) *(int32_t*)(q + g * 64) = 0;
            pd[b * 16 + j] = 0.0f;
            continue;
          }
          const float* xr = (const float*)(xb + (t0 + j) * x->nb[1]) + (kb0 + b) * 32;
          pd[b * 16 + j] = quantize_block_q8_0(q, xr, k_panel_off);
        }
      /* TensorLoad reads past the L1: the panel goes to L2 first */
      et_evict(ET_CACHE_L2, panel, (uint64_t)kc * 512);
      for (int64_t n = nt0 * 16; n < nt1 * 16; n += 16) {
        for (int i = 0; i < 256; ++i) acc[i] = 0.0f;
        for (int64_t b = 0; b < kc; b += 2) {
          const int pair = b + 1 < kc;
          for (int i = 0; i < 16; ++i) {
            const uint8_t* wr = wb + (n + i) * w->nb[1] + (kb0 + b) * wblk;
            stage_block(want, wr, stage + i * 64);
            if (pair) stage_block(want, wr + wblk, stage + i * 64 + 32);
          }
          et_evict(ET_CACHE_L2, stage, sizeof stage);
          et_tensor_load(0, stage, 16, 64);
          et_tensor_load(16, panel + b * 512, pair ? 16 : 8, 64);
          et_tensor_wait_load();
          for (int h = 0; h <= pair; ++h) {
            et_tensor_fma_store(et_tensor_ima8_ctrl(16, 32, (uint64_t)h * 8, 0, 16 + (uint64_t)h * 8), ctile);
            gather_scales(dw, wb + n * w->nb[1] + (kb0 + b + h) * wblk, row_off);
            tile_scale_acc(acc, ctile, dw, pd + (b + h) * 16);
          }
        }
        for (int64_t j = 0; j < tm; ++j) tile_column_out((float*)(db + (t0 + j) * d->nb[1]) + n, acc + j, kb0 > 0);
      }
    }
  }
  const uint64_t err = et_tensor_error();
  return err ? et_fail(ET_STATUS_TENSOR_ERROR, (uint32_t)err) : ET_STATUS_OK;
}

static int64_t mul_mat_tensor_q8_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_tensor(a, ET_TYPE_Q8_0);
}
static int64_t mul_mat_tensor_q4_0(const void* a, const EtEnv* e) {
  (void)e;
  return mul_mat_tensor(a, ET_TYPE_Q4_0);
}
ET_KERNEL(ET_K_MUL_MAT_TU_Q8_0, mul_mat_tensor_q8_0);
ET_KERNEL(ET_K_MUL_MAT_TU_Q4_0, mul_mat_tensor_q4_0);

/* ---- MUL_MAT of F16 weights through the tensor unit (fp16 TensorFMA, fp32 accumulation) -----
 * dst[n, t] = sum_k w[n, k] * f16(x[t, k]): the activations rounded to f16 as the SIMD kernel and
 * the CPU reference round them (fcvt.f16.ps, round to nearest even; f16 subnormals flush to
 * zero), the products summed in fp32 by the tensor unit (pairs of k per pass, rounding toward
 * zero) across a whole K chunk of ET_TU16_KC * 32 values in the f registers, then added to dst
 * in fp32. Work items, even harts and the dst lines as mul_mat_tensor. Per (16 activation rows, K
 * chunk) the hart converts x into a B panel on its stack in the fp16 TensorFMA B layout (per 32
 * k one 1 KiB step of 16 lines, line g holding activation row j's k = 2g, 2g + 1 at bytes 4j..4j+3;
 * rows past the batch zero) and evicts it to L2; then per 16 weight rows and step one TensorLoad
 * puts the 16 weight rows' 32 halves straight from the weight tensor (row stride nb[1], a multiple
 * of 64 as K % 32 == 0) into SCP lines 0-15, one the step's panel lines into SCP lines 16-31, and
 * one TensorFMA16A32 (16 x 16 x 32) accumulates into f0-f31 (the first step of a chunk starts
 * from zero). The chunk's tile is stored and written to dst transposed as mul_mat_tensor does.
 * Needs the scratchpad, N % 16 == 0, K % 32 == 0, a 64-byte aligned weight and dst rows. */
#define ET_TU16_KC 32 /* 32-value steps per K chunk: the B panel is ET_TU16_KC KiB of stack */

/* Value k of a 32-step of activation row j goes to panel byte (k / 2) * 64 + 4j + (k % 2) * 2. */
static const int32_t k_panel16_off[32] = {0,   2,   64,  66,  128, 130, 192, 194, 256, 258, 320,
                                          322, 384, 386, 448, 450, 512, 514, 576, 578, 640, 642,
                                          704, 706, 768, 770, 832, 834, 896, 898, 960, 962};

/* 32 floats at x rounded to f16 and scattered into one panel step at q (= step + 4j). */
static void step_f16_scatter(uint8_t* q, const float* x) {
  __asm__ volatile(ETI_FLW(ft8, 0, o) ETI_FLW(ft9, 32, o) ETI_FLW(ft10, 64, o) ETI_FLW(ft11, 96, o) ETI_FLW(ft0, 0, x)
                       ETI_FCVT_F16_PS(ft0, ft0) ETI_FSCH(ft0, ft8, q) ETI_FLW(ft0, 32, x) ETI_FCVT_F16_PS(ft0, ft0)
                           ETI_FSCH(ft0, ft9, q) ETI_FLW(ft0, 64, x) ETI_FCVT_F16_PS(ft0, ft0) ETI_FSCH(ft0, ft10, q)
                               ETI_FLW(ft0, 96, x) ETI_FCVT_F16_PS(ft0, ft0) ETI_FSCH(ft0, ft11, q)
                   :
                   : [x] "r"(x), [q] "r"(q), [o] "r"(k_panel16_off)
                   : "ft0", "ft8", "ft9", "ft10", "ft11", "memory");
}

/* `steps` TensorLoad + TensorFMA16A32 pairs accumulating one 16 x 16 fp32 tile in f0-f31 (A: 16
 * weight rows of 64 bytes at a, a + stride, ...; B: the panel steps at b, 1 KiB apart), then the
 * tile to out (1 KiB, row i = weight row i). One asm statement: nothing may touch an f register
 * while the tile accumulates. */
static void tile_f16_run(const uint8_t* a, uint64_t stride, const uint8_t* b, int64_t steps, void* out) {
  const uint64_t bload = (16ull << 53) | 15ull; /* SCP line 16, 16 lines */
  uint64_t ctrl = et_tensor_fma16_ctrl(16, 32, 0, 0, 16), t;
  __asm__ volatile(
      "1:\n\tmv x31, %[s]\n\tori %[t], %[a], 15\n\tcsrw 0x83f, %[t]\n\t"
      "li x31, 64\n\tor %[t], %[b], %[bl]\n\tcsrw 0x83f, %[t]\n\tcsrwi 0x830, 0\n\t"
      "csrw 0x801, %[c]\n\tcsrwi 0x830, 7\n\tandi %[c], %[c], -2\n\t"
      "addi %[a], %[a], 64\n\taddi %[b], %[b], 1024\n\taddi %[n], %[n], -1\n\tbnez %[n], 1b\n\t" ETI_FSW(f0, 0, o)
          ETI_FSW(f1, 32, o) ETI_FSW(f2, 64, o) ETI_FSW(f3, 96, o) ETI_FSW(f4, 128, o) ETI_FSW(f5, 160, o) ETI_FSW(
              f6, 192, o) ETI_FSW(f7, 224, o) ETI_FSW(f8, 256, o) ETI_FSW(f9, 288, o) ETI_FSW(f10, 320, o)
              ETI_FSW(f11, 352, o) ETI_FSW(f12, 384, o) ETI_FSW(f13, 416, o) ETI_FSW(f14, 448, o) ETI_FSW(f15, 480, o)
                  ETI_FSW(f16, 512, o) ETI_FSW(f17, 544, o) ETI_FSW(f18, 576, o) ETI_FSW(f19, 608, o)
                      ETI_FSW(f20, 640, o) ETI_FSW(f21, 672, o) ETI_FSW(f22, 704, o) ETI_FSW(f23, 736, o)
                          ETI_FSW(f24, 768, o) ETI_FSW(f25, 800, o) ETI_FSW(f26, 832, o) ETI_FSW(f27, 864, o)
                              ETI_FSW(f28, 896, o) ETI_FSW(f29, 928, o) ETI_FSW(f30, 960, o) ETI_FSW(f31, 992, o)
      : [a] "+r"(a), [b] "+r"(b), [n] "+r"(steps), [c] "+r"(ctrl), [t] "=&r"(t)
      : [s] "r"(stride), [bl] "r"(bload), [o] "r"(out)
      : "x31", "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12", "f13", "f14", "f15",
        "f16", "f17", "f18", "f19", "f20", "f21", "f22", "f23", "f24", "f25", "f26", "f27", "f28", "f29", "f30", "f31",
        "memory");
}

static int64_t mul_mat_tensor_f16(const void* args, const EtEnv* e) {
  (void)e;
  const EtMulMatArgs* p = (const EtMulMatArgs*)args;
  const EtTensor *w = &p->w, *x = &p->x, *d = &p->dst;
  const int64_t bad = tensor_check(p, ET_TYPE_F16);
  if (bad != ET_STATUS_OK) return bad;
  if ((w->addr | w->nb[1] | w->nb[2] | w->nb[3]) % 64 != 0) return et_fail(ET_STATUS_BAD_ALIGN, 0);
  const int64_t K = w->ne[0], N = w->ne[1], T = x->ne[1];
  const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
  const int64_t NT = N / 16, MC = (T + 15) / 16, B2 = x->ne[2], nsteps = K / 32;
  int64_t i0, i1;
  if (!tensor_items(p, &i0, &i1)) return ET_STATUS_OK;

  uint8_t panel[ET_TU16_KC * 1024] __attribute__((aligned(64)));
  float ctile[256] __attribute__((aligned(64)));
  for (int64_t item = i0; item < i1;) {
    const int64_t bm = item / NT, nt0 = item % NT, nt1 = NT < nt0 + (i1 - item) ? NT : nt0 + (i1 - item);
    const int64_t i3 = bm / (B2 * MC), i2 = (bm / MC) % B2, t0 = (bm % MC) * 16;
    item += nt1 - nt0;
    const uint8_t* wb = (const uint8_t*)(uintptr_t)w->addr + (i2 / r2) * w->nb[2] + (i3 / r3) * w->nb[3];
    const uint8_t* xb = (const uint8_t*)(uintptr_t)x->addr + i2 * x->nb[2] + i3 * x->nb[3];
    uint8_t* db = (uint8_t*)(uintptr_t)d->addr + i2 * d->nb[2] + i3 * d->nb[3];
    const int64_t tm = T - t0 < 16 ? T - t0 : 16;
    for (int64_t s0 = 0; s0 < nsteps; s0 += ET_TU16_KC) {
      const int64_t kc = nsteps - s0 < ET_TU16_KC ? nsteps - s0 : ET_TU16_KC;
      for (int64_t j = 0; j < 16; ++j)
        for (int64_t st = 0; st < kc; ++st) {
          uint8_t* q = panel + st * 1024 + j * 4;
          if (j >= tm) {
            for (int g = 0; g < 16; ++g) *(int32_t*)(q + g * 64) = 0;
            continue;
          }
          step_f16_scatter(q, (const float*)(xb + (t0 + j) * x->nb[1]) + (s0 + st) * 32);
        }
      /* TensorLoad reads past the L1: the panel goes to L2 first */
      et_evict(ET_CACHE_L2, panel, (uint64_t)kc * 1024);
      for (int64_t n = nt0 * 16; n < nt1 * 16; n += 16) {
        tile_f16_run(wb + n * w->nb[1] + s0 * 64, w->nb[1], panel, kc, ctile);
        for (int64_t j = 0; j < tm; ++j) tile_column_out((float*)(db + (t0 + j) * d->nb[1]) + n, ctile + j, s0 > 0);
      }
    }
  }
  const uint64_t err = et_tensor_error();
  return err ? et_fail(ET_STATUS_TENSOR_ERROR, (uint32_t)err) : ET_STATUS_OK;
}
ET_KERNEL(ET_K_MUL_MAT_TU_F16, mul_mat_tensor_f16);
