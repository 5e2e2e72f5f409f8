/* et_q6_k.h - Q6_K super-block dequantization (device code): 256 weights from ql[128] (low 4
 * bits), qh[64] (high 2 bits), 16 int8 scales and an f16 d (GGUF / ggml layout, 210 bytes):
 * y[j] = d * scale[j / 16] * q, q = (low | high << 4) - 32, each product rounded in that order
 * as core/quant's dequantize_q6_K does (results equal the CPU's bit for bit). Scalar code: the
 * 6-bit assembly of the quants is not worth lanes for the few Q6_K tensors of a K-quant mix. */
#ifndef OPAL_ET_Q6_K_H
#define OPAL_ET_Q6_K_H

#include "backends/et/kernels/et_runtime.h"

static inline void et_dequant_q6_k_block(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = (const int8_t*)(b + 192);
  const float d = et_f16_to_f32((uint16_t)(b[208] | (b[209] << 8)));
  for (int g = 0; g < 2; ++g)
    for (int part = 0; part < 4; ++part)
      for (int l = 0; l < 32; ++l) {
        const int j = 128 * g + 32 * part + l;
        const uint8_t lbyte = ql[64 * g + l + 32 * (part & 1)];
        const int low = part < 2 ? (lbyte & 0xF) : (lbyte >> 4);
        const int high = (qh[32 * g + l] >> (2 * part)) & 3;
        y[j] = d * (float)sc[j / 16] * (float)((low | (high << 4)) - 32);
      }
}

#endif /* OPAL_ET_Q6_K_H */
