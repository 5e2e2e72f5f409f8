// Row reductions on f32: RMS_NORM (sum of squares in double, then
// x * 1/sqrtf(mean + eps), as ggml), SOFTMAX (max-subtracted exp, sum in
// double, multiply by 1/sum; exp and the sum's grouping as llama.cpp's
// AVX-512 build, kernels/llama_order.h), SUM_ROWS (double accumulation).
//
// RMS_NORM's sum is one chain of dependent double adds per row (ggml's
// order), ~4 cycles an element. Rows are independent, so several rows at
// once (QK-norm: a head a row, 8-16 rows of 128 at decode) run kRmsRows
// chains side by side, each in its row's order: the same bits, several
// times the throughput.
#include <cmath>

#include "backends/cpu/kernels/llama_order.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {

namespace {

constexpr int kRmsRows = 4;

// RMS_NORM of rows [r, r + kRmsRows): the chains interleaved, each summed in element order.
void rms_norm_rows(const Tensor& node, const Tensor& a, int64_t r, int64_t n) {
  const float* x[kRmsRows];
  float* y[kRmsRows];
  double sum[kRmsRows];
  for (int j = 0; j < kRmsRows; ++j) {
    x[j] = reinterpret_cast<const float*>(row_ptr_flat(a, r + j));
    y[j] = reinterpret_cast<float*>(row_ptr_flat(node, r + j));
    sum[j] = 0.0;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < kRmsRows; ++j) sum[j] += double(x[j][i] * x[j][i]);
  for (int j = 0; j < kRmsRows; ++j) {
    const float mean = float(sum[j] / double(n));
    const float s = 1.0f / std::sqrt(mean + node.fparams[0]);
    for (int64_t i = 0; i < n; ++i) y[j][i] = x[j][i] * s;
  }
}

}  // namespace

void compute_norm(const Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const int64_t n = a.ne[0];
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t r0, r1;
    split_range(node.n_rows(), ith, nth, &r0, &r1);
    if (node.op == Op::RmsNorm)
      for (; r0 + kRmsRows <= r1; r0 += kRmsRows) rms_norm_rows(node, a, r0, n);
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = reinterpret_cast<const float*>(row_ptr_flat(a, r));
      float* y = reinterpret_cast<float*>(row_ptr_flat(node, r));
      switch (node.op) {
        case Op::RmsNorm: {
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
          const float mean = float(sum / double(n));
          const float s = 1.0f / std::sqrt(mean + node.fparams[0]);
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
          break;
        }
        case Op::Softmax: {  // ggml_soft_max / ggml_vec_soft_max_f32 (AVX-512)
          float mx = -INFINITY;
          for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
          double sum = 0.0;
          const int64_t n16 = n & ~int64_t(15);
          for (int64_t i = 0; i < n16; i += 16) {  // ggml_v_expf on 16 lanes, each chunk's sum in float
            for (int64_t j = 0; j < 16; ++j) y[i + j] = llama_order::expf_avx512(x[i + j] - mx);
            sum += double(llama_order::reduce_add16(y + i));
          }
          for (int64_t i = n16; i < n; ++i) {  // the tail: the C library's expf
            const float e = std::exp(x[i] - mx);
            y[i] = e;
            sum += double(e);
          }
          const float inv = float(1.0 / sum);
          for (int64_t i = 0; i < n; ++i) y[i] *= inv;
          break;
        }
        case Op::SumRows: {
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += double(x[i]);
          y[0] = float(sum);
          break;
        }
        default: break;
      }
    }
  });
}

}  // namespace opal::cpu
