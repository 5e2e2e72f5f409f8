// Vector helpers for CPU attention over an f16 KV cache, per ISA (the
// matmul kernels' dispatch: isa.h). Null under the scalar ISA, where
// ops/attention.cpp uses the scalar forms of kernels/ref/llama_order.h.
// Every helper returns exactly what its scalar form returns (llama.cpp's
// summation orders), so the ISA never changes a result.
#pragma once
#include <cstdint>

namespace opal::cpu {

struct AttnKernels {
  const char* name;
  // sum_i f16(k[i]) * q[i] in tinyBLAS order (llama_order::dot_lanes16); n % 16 == 0.
  float (*dot_f16_lanes16)(const uint16_t* k, const float* q, int64_t n);
  // The same in ggml_vec_dot_f16 order (llama_order::dot_vec_f16).
  float (*dot_f16_vec)(const uint16_t* k, const float* q, int64_t n);
  // acc[i] = fma(f16(v[i]), p, acc[i]).
  void (*axpy_f16)(float p, const uint16_t* v, float* acc, int64_t n);
};

// The selected ISA's helpers (falling back avx512 -> avx2), or null.
const AttnKernels* attn_kernels();

namespace avx2 { extern const AttnKernels kAttnKernels; }
namespace avx512 { extern const AttnKernels kAttnKernels; }

}  // namespace opal::cpu
