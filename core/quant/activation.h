// Activation quantization: how llama.cpp's CPU backend converts the f32
// activations of a matmul to the weight type's vec_dot type before the dot
// products. It is NOT the weight quantizer (core/quant.h, what llama-quantize
// uses): on x86 (the machine the goldens come from) llama.cpp's
// quantize_row_q8_0 / q8_1 take the inverse scale as 127 / amax and round
// half to even (SIMD rounding), where the reference weight quantizer uses
// 1 / (amax / 127) and rounds half away from zero. One rounded value in a few
// thousand differs, which is enough to fork greedy decoding after a few dozen
// tokens. Q8_K activations use the reference quantizer, as llama.cpp does.
//
// Every CPU kernel (reference and SIMD) must produce exactly these bytes.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace opal {

// Q8_1 as llama.cpp stores it: d (f16), s = d * sum(qs) (f16), 32 int8.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// True for the vec_dot types below.
bool is_activation_type(DType t);
// Quantizes k values (a whole number of blocks) of one activation row into dst.
// t is Q8_0, Q8_1 or Q8_K.
void quantize_activation_row(DType t, const float* x, void* dst, int64_t k);
// The values the quantized row stands for.
void dequantize_activation_row(DType t, const void* src, float* dst, int64_t k);

}  // namespace opal
