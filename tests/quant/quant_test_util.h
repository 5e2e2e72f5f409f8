// Helpers shared by the tests of the reference quantizers.
#pragma once
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/quant.h"
#include "support/test_support.h"

namespace opal::test {

inline std::vector<float> read_f32_file(const std::string& path) {
  const auto bytes = read_bytes(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// The whole tensor as f32, read as one flat block stream.
inline std::vector<float> dequantize_tensor(const gguf::TensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  dequantize_row(t.type, t.data, out.data(), t.n_elements());
  return out;
}

// Quantizes an f32 tensor row by row (ne[0] per row) to type.
inline std::vector<uint8_t> quantize_tensor(const std::vector<float>& src, int64_t n_per_row, DType type) {
  const int64_t nrows = int64_t(src.size()) / n_per_row;
  std::vector<uint8_t> out(size_t(nrows) * row_bytes(type, n_per_row));
  quantize_rows(type, src.data(), out.data(), nrows, n_per_row);
  return out;
}

inline double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / double(a.size()));
}

}  // namespace opal::test
