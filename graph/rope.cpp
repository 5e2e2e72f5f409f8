#include "graph/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace opal {

void yarn_corr_dims(int n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow, int32_t* low,
                    int32_t* high) {
  auto corr_dim = [&](float n_rotations) {
    return float(n_rot) * std::log(float(n_ctx_orig) / (n_rotations * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(freq_base));
  };
  const float start = std::floor(corr_dim(beta_fast)), end = std::ceil(corr_dim(beta_slow));
  *low = int32_t(std::max(0.0f, start));
  *high = int32_t(std::min(float(n_rot - 1), end));
}

RopeParams rope_params_of(const Tensor& n) {
  RopeParams p;
  p.n_rot = n.iparams[0];
  p.mode = RopeMode(n.iparams[1]);
  p.corr_low = n.iparams[2];
  p.corr_high = n.iparams[3];
  p.freq_base = n.fparams[0];
  p.freq_scale = n.fparams[1];
  p.ext_factor = n.fparams[2];
  p.attn_factor = n.fparams[3] != 0.0f ? n.fparams[3] : 1.0f;
  return p;
}

void rope_cos_sin(const RopeParams& p, float pos, const float* ff, float* cs) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
  float mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  if (p.unit_magnitude) mscale = 1.0f;
  float theta_extrap = pos;
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const float te = theta_extrap / (ff ? ff[i] : 1.0f);
    float theta = p.freq_scale * te;
    if (p.ext_factor != 0.0f) {
      const float y = (float(i) - float(p.corr_low)) / std::max(0.001f, float(p.corr_high - p.corr_low));
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      theta = theta * (1.0f - mix) + te * mix;
    }
    cs[2 * i] = std::cos(theta) * mscale;
    cs[2 * i + 1] = std::sin(theta) * mscale;
    theta_extrap *= theta_scale;
  }
}

Tensor* build_rope(Graph& g, Tensor* x, Tensor* pos, Tensor* freq_factors, const RopeParams& p) {
  Tensor* t = g.rope(x, pos, freq_factors, p.n_rot, p.mode, p.freq_base, p.freq_scale);
  t->fparams[2] = p.ext_factor;
  t->fparams[3] = p.attn_factor;
  t->iparams[2] = p.corr_low;
  t->iparams[3] = p.corr_high;
  return t;
}

}  // namespace opal
