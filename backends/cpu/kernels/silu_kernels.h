// Vector kernels for SILU and SWIGLU (ops/elementwise.cpp), equal bit for bit
// to the scalar form, llama_order::silu_at: on a row of n elements the first
// n & ~15 take ggml_v_silu's polynomial exp (llama_order::silu_avx512,
// x / (1 + expf_avx512(0 - x))), the n % 16 tail the C library's expf
// (llama.cpp's AVX-512 ggml_vec_silu_f32 / ggml_vec_swiglu_f32, whose 16-lane
// chunks these follow; the exp is per element, so 8 lanes give the same bits).
// SWIGLU is silu(g) * u.
#pragma once
#include <cstdint>

namespace opal::cpu {

struct SiluKernels {
  const char* name;
  // y[i] = silu(x[i]) for i < n.
  void (*silu_row)(const float* x, float* y, int64_t n);
  // y[i] = silu(g[i]) * u[i] for i < n.
  void (*swiglu_row)(const float* g, const float* u, float* y, int64_t n);
};

// The kernels for the selected ISA (avx2's under avx2, avx2-vnni and avx512),
// or null under scalar and neon (use the scalar form).
const SiluKernels* silu_kernels();

namespace avx2 {
extern const SiluKernels kSiluKernels;
}

}  // namespace opal::cpu
