// attend_vt_f16_ref: the V product of the -fa 0 attention over a transposed V cache, in scalar form
// (kernels/attn_kernels.h). Row j, column i: per-lane FMA accumulators over the cells in order (cell r into lane
// r % lanes, ggml_vec_dot_f16's 4 x 16 lanes or tinyBLAS's 16), then ggml's reduction of the lanes
// (kernels/llama_order.h) — what accumulate_f16 and reduce_lanes give for the same p and V values.
#include <cmath>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/llama_order.h"
#include "core/fp16.h"

namespace opal::cpu {

void attend_vt_f16_ref(const float* p, int64_t ldp, const int64_t* n, int64_t m, const uint16_t* vt, int64_t ldv,
                       int64_t cols, int64_t lanes, float* const* out, int64_t out_off) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < cols; ++i) {
      float acc[64] = {};
      for (int64_t r = 0; r < n[j]; ++r)
        acc[r % lanes] = std::fma(f16_to_f32(vt[i * ldv + r]), p[j * ldp + r], acc[r % lanes]);
      float t[16];
      for (int l = 0; l < 16; ++l) t[l] = lanes == 16 ? acc[l] : (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
      out[j][out_off + i] = llama_order::reduce_add16(t);
    }
}

}  // namespace opal::cpu
