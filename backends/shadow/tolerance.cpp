// NMSE comparison of a backend's output with the CPU reference; the
// per-op limits are a column of the op-info table (graph/op_info.cpp).
#include "backends/shadow/tolerance.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "graph/op_info.h"

namespace opal {

double max_nmse(const Tensor& node) { return op_info(node.op).max_nmse(node); }

ErrorStats compare_outputs(const float* out, const float* ref, int64_t n) {
  ErrorStats s;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = out[i], b = ref[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (std::isnan(a) != std::isnan(b) || (std::isinf(a) && a != b)) {
        if (s.first_bad < 0) s.first_bad = i;
        s.max_abs = INFINITY;
      }
      continue;
    }
    const double d = a - b;
    num += d * d;
    den += b * b;
    s.max_abs = std::max(s.max_abs, std::fabs(d));
  }
  s.nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
  if (s.first_bad >= 0) s.nmse = INFINITY;
  return s;
}

void tensor_to_f32(const Tensor& t, const void* data, float* dst) {
  const uint8_t* base = static_cast<const uint8_t*>(data);
  int64_t o = 0;
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
          const uint8_t* p = base + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
          float v = 0;
          switch (t.type) {
            case DType::F32: std::memcpy(&v, p, 4); break;
            case DType::F16: {
              uint16_t h;
              std::memcpy(&h, p, 2);
              v = f16_to_f32(h);
              break;
            }
            case DType::BF16: {
              uint16_t h;
              std::memcpy(&h, p, 2);
              v = bf16_to_f32(h);
              break;
            }
            case DType::I32: {
              int32_t x;
              std::memcpy(&x, p, 4);
              v = float(x);
              break;
            }
            default: v = NAN; break;  // quantized outputs do not occur
          }
          dst[o++] = v;
        }
}

}  // namespace opal
