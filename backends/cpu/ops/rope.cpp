// ROPE on f32 [D, H, T] with i32 positions, as ggml computes it (to match
// llama.cpp's goldens at long range). The angles of each position come from
// graph/rope.h (plain, linear, Llama-3 frequency factors, YaRN). Normal
// mode rotates (x[2i], x[2i+1]); NeoX mode rotates (x[i], x[i + n_rot/2]).
// Dims past n_rot are copied.
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"
#include "graph/rope.h"

namespace opal::cpu {

void compute_rope(const Tensor& node, const OpContext& ctx) {
  const Tensor& x = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* ff = node.src[2];
  const RopeParams p = rope_params_of(node);
  const int n_rot = p.n_rot;
  const bool neox = p.mode == RopeMode::Neox;
  const int64_t D = x.ne[0], H = x.ne[1], T = x.ne[2];
  const float* factors = ff ? static_cast<const float*>(ff->data) : nullptr;
  run_rows(ctx, node.n_elements(), [&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T * x.ne[3], ith, nth, &t0, &t1);
    float cs[2 * 512];  // cos/sin per pair; n_rot <= 1024 is checked by supports()
    for (int64_t tt = t0; tt < t1; ++tt) {
      const int64_t t = tt % T, i3 = tt / T;
      rope_cos_sin(p, float(static_cast<const int32_t*>(pos.data)[t]), factors, cs);
      for (int64_t h = 0; h < H; ++h) {
        const float* src = reinterpret_cast<const float*>(row_ptr(x, h, t, i3));
        float* dst = reinterpret_cast<float*>(row_ptr(node, h, t, i3));
        for (int i = 0; i < n_rot / 2; ++i) {
          const float c = cs[2 * i], s = cs[2 * i + 1];
          const int64_t a = neox ? i : 2 * i;
          const int64_t b = neox ? i + n_rot / 2 : 2 * i + 1;
          const float x0 = src[a], x1 = src[b];
          // ggml's x0*cos - x1*sin and x0*sin + x1*cos as gcc contracts them
          // (the first product fused); explicit so that no build flag changes it.
          dst[a] = std::fma(x0, c, -(x1 * s));
          dst[b] = std::fma(x0, s, x1 * c);
        }
        for (int64_t i = n_rot; i < D; ++i) dst[i] = src[i];
      }
    }
  });
}

}  // namespace opal::cpu
