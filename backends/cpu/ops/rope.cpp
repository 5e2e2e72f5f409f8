// ROPE on f32 [D, H, T] with i32 positions, as ggml computes it (to match
// llama.cpp's goldens at long range): per token, theta starts at the position
// and is multiplied by theta_scale = base^(-2/n_rot) for each pair (float,
// iteratively); pair i uses theta / freq_factor[i] (Llama-3 `rope_freqs`)
// times freq_scale (linear scaling). Normal mode rotates (x[2i], x[2i+1]);
// NeoX mode rotates (x[i], x[i + n_rot/2]). Dims past n_rot are copied.
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"

namespace opal::cpu {

void compute_rope(const Tensor& node, const OpContext& ctx) {
  const Tensor& x = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* ff = node.src[2];
  const int n_rot = node.iparams[0];
  const bool neox = RopeMode(node.iparams[1]) == RopeMode::Neox;
  const float base = node.fparams[0], freq_scale = node.fparams[1];
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  const int64_t D = x.ne[0], H = x.ne[1], T = x.ne[2];
  const float* factors = ff ? static_cast<const float*>(ff->data) : nullptr;
  ctx.pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    split_range(T * x.ne[3], ith, nth, &t0, &t1);
    float cs[2 * 512];  // cos/sin per pair; n_rot <= 1024 is checked by supports()
    for (int64_t tt = t0; tt < t1; ++tt) {
      const int64_t t = tt % T, i3 = tt / T;
      const float p = float(static_cast<const int32_t*>(pos.data)[t]);
      float theta = p;
      for (int i = 0; i < n_rot / 2; ++i) {
        const float f = factors ? factors[i] : 1.0f;
        const float th = freq_scale * (theta / f);
        cs[2 * i] = std::cos(th);
        cs[2 * i + 1] = std::sin(th);
        theta *= theta_scale;
      }
      for (int64_t h = 0; h < H; ++h) {
        const float* src = reinterpret_cast<const float*>(row_ptr(x, h, t, i3));
        float* dst = reinterpret_cast<float*>(row_ptr(node, h, t, i3));
        for (int i = 0; i < n_rot / 2; ++i) {
          const float c = cs[2 * i], s = cs[2 * i + 1];
          const int64_t a = neox ? i : 2 * i;
          const int64_t b = neox ? i + n_rot / 2 : 2 * i + 1;
          const float x0 = src[a], x1 = src[b];
          dst[a] = x0 * c - x1 * s;
          dst[b] = x0 * s + x1 * c;
        }
        for (int64_t i = n_rot; i < D; ++i) dst[i] = src[i];
      }
    }
  });
}

}  // namespace opal::cpu
