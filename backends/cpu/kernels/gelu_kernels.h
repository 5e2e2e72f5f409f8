// Vector kernels for GELU and GEGLU (ops/elementwise.cpp), per ISA, equal bit
// for bit to the scalar form (the ISA never changes a result).
//
// The scalar form (llama.cpp's GGML_GELU_FP16 path): for x <= -10 the result
// is 0, for x >= 10 it is x, otherwise table[f32_to_f16(x)], where table holds
// the 65536 f16-rounded tanh-form GELU values widened to f32 (built once by
// ops/elementwise.cpp and passed in). GEGLU is gelu(g) * u, except g <= -10
// gives 0 whatever u is. NaN compares false both ways and so reads the table.
//
// The SIMD forms round x to f16 with F16C's vcvtps2ph in round-to-nearest-even
// (the rounding of core/fp16.h's f32_to_f16, NaNs quieted keeping the top
// payload bits as it does), widen the 16-bit codes to 32-bit indices, gather
// from the table, and then apply the two thresholds with ordered compares.
#pragma once
#include <cstdint>

namespace opal::cpu {

struct GeluKernels {
  const char* name;
  // y[i] = gelu(x[i]) for i < n.
  void (*gelu_row)(const float* table, const float* x, float* y, int64_t n);
  // y[i] = gelu(g[i]) * u[i] (0 where g[i] <= -10) for i < n.
  void (*geglu_row)(const float* table, const float* g, const float* u, float* y, int64_t n);
};

// The selected ISA's kernels (avx512, avx2), or null under scalar (use the scalar form).
const GeluKernels* gelu_kernels();

namespace avx2 {
extern const GeluKernels kGeluKernels;
}
namespace avx512 {
extern const GeluKernels kGeluKernels;
}

}  // namespace opal::cpu
