// Calling one CPU matmul kernel table entry (backends/cpu/kernels) in a test:
// activation rows through the entry's convert_act, and one gemm over a slice
// of weight rows into a pre-filled output. Header-only and free of GoogleTest,
// so that tests/kernels_arm's qemu check program uses it too.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/kernels/matmul_kernels.h"
#include "core/quant.h"

namespace opal::test {

// rows x k weights of type t, quantized from N(0, 1) floats drawn from rng.
inline std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> f(size_t(rows * k));
  for (auto& v : f) v = val(rng);
  std::vector<uint8_t> w(row_bytes(t, k) * uint64_t(rows));
  quantize_rows(t, f.data(), w.data(), rows, k);
  return w;
}

// n rows of k floats at x as kern's activation rows, followed by `pad` bytes of 0xAB.
inline std::vector<uint8_t> convert_acts(const cpu::MatmulKernels& kern, const float* x, int64_t n, int64_t k,
                                         size_t pad = 0) {
  const uint64_t rb = kern.act_row_bytes(k);
  std::vector<uint8_t> out(rb * uint64_t(n) + pad, 0xAB);
  for (int64_t a = 0; a < n; ++a) kern.convert_act(kern.act_type, x + a * k, out.data() + a * rb, k);
  return out;
}

struct GemmCall {
  int64_t row_begin = 0;     // the slice of weight rows [row_begin, rows)
  int64_t out_stride = 0;    // floats between output rows; 0: rows
  float fill = 0.0f;         // every output float before the call
  bool single_rows = false;  // GemmArgs::single_rows
  bool scratch = true;       // false: GemmArgs::scratch null (a caller without one)
};

// Runs kern.gemm over rows of w (type t, k elements each) and n_act activation
// rows; returns the whole output (out_stride x n_act floats).
inline std::vector<float> run_gemm(const cpu::MatmulKernels& kern, const std::vector<uint8_t>& w, DType t, int64_t rows,
                                   int64_t k, const std::vector<uint8_t>& act, int64_t n_act,
                                   const GemmCall& call = {}) {
  const int64_t stride = call.out_stride > 0 ? call.out_stride : rows;
  std::vector<float> out(size_t(stride * n_act), call.fill);
  std::vector<float> scratch(size_t(kern.scratch_floats(k) + 1));
  cpu::GemmArgs g;
  g.w = w.data();
  g.w_row_bytes = row_bytes(t, k);
  g.k = k;
  g.row_begin = call.row_begin;
  g.row_end = rows;
  g.act = act.data();
  g.act_row_bytes = kern.act_row_bytes(k);
  g.n_act = n_act;
  g.out = out.data();
  g.out_stride = stride;
  g.scratch = call.scratch ? scratch.data() : nullptr;
  g.single_rows = call.single_rows;
  kern.gemm(g);
  return out;
}

}  // namespace opal::test
