// dots_f16_heads_ref: the -fa 0 decode's K dots for the query heads of one kv head in scalar form
// (kernels/attn_kernels.h): each visible cell's f16 K row widened exactly, then each head's dot in llama.cpp's
// order (kernels/llama_order.h: tinyBLAS's 16 lanes for a batch, ggml_vec_dot_f16's 4 x 16 lanes and double
// tail for one token) — what dots_f16 gives head by head.
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/llama_order.h"
#include "core/fp16.h"

namespace opal::cpu {

void dots_f16_heads_ref(const uint8_t* k, uint64_t k_stride, const int32_t* cells, int64_t n, const float* q,
                        int64_t ldq, int64_t m, int64_t dk, bool lanes16, float* out, int64_t ldo) {
  std::vector<float> row(static_cast<size_t>(dk));
  for (int64_t r = 0; r < n; ++r) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + uint64_t(cells[r]) * k_stride);
    for (int64_t i = 0; i < dk; ++i) row[size_t(i)] = f16_to_f32(kr[i]);
    for (int64_t h = 0; h < m; ++h)
      out[h * ldo + r] = lanes16 ? llama_order::dot_lanes16(row.data(), q + h * ldq, dk)
                                 : llama_order::dot_vec_f16(row.data(), q + h * ldq, dk);
  }
}

}  // namespace opal::cpu
