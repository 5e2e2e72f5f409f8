// Vector helpers for CPU attention over an f16 KV cache, per ISA (the
// matmul kernels' dispatch: isa.h). Null under the scalar ISA, where
// ops/attention.cpp keeps its reference arithmetic (double accumulation).
#pragma once
#include <cstdint>

namespace opal::cpu {

struct AttnKernels {
  const char* name;
  // sum_i f16(k[i]) * q[i], f32 accumulation.
  float (*dot_f16)(const uint16_t* k, const float* q, int64_t n);
  // acc[i] += p * f16(v[i]).
  void (*axpy_f16)(float p, const uint16_t* v, float* acc, int64_t n);
};

// The selected ISA's helpers (falling back avx512 -> avx2), or null.
const AttnKernels* attn_kernels();

namespace avx2 { extern const AttnKernels kAttnKernels; }
namespace avx512 { extern const AttnKernels kAttnKernels; }

}  // namespace opal::cpu
