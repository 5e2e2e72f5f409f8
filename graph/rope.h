// RoPE variants as data: plain, linear-scaled, Llama-3 frequency factors and
// YaRN. One function computes the (cos, sin) of every rotated pair for one
// position; the ROPE op (backends/cpu/ops/rope.cpp) and the KV-cache key
// shift (runtime/key_shift.cpp) both use it, so they always agree.
//
// Pair i at position p (ggml's formulation, to match llama.cpp):
//   theta_extrap = p * base^(-2i/n_rot) / freq_factor[i]   (iterated in float)
//   theta_interp = freq_scale * theta_extrap                (freq_scale = 1/factor)
//   YaRN (ext_factor != 0): mix = ramp(i) * ext_factor, with ramp 1 below the
//     correction range [corr_low, corr_high] and 0 above it, linear between;
//     theta = theta_interp * (1 - mix) + theta_extrap * mix, and the
//     magnitude mscale = attn_factor * (1 + 0.1 * ln(1 / freq_scale)).
//   Otherwise theta = theta_interp, mscale = attn_factor.
//   (cos, sin) = (cos theta, sin theta) * mscale.
// corr_low/high (ggml_rope_yarn_corr_dims) are whole numbers: the pair
// indices where the wavelength crosses n_ctx_orig / beta_fast and / beta_slow.
//
// In the graph, ROPE keeps iparams {n_rot, mode, corr_low, corr_high} and
// fparams {freq_base, freq_scale, ext_factor, attn_factor}; attn_factor 0
// (a node built without YaRN) means 1.
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace opal {

struct RopeParams {
  int n_rot = 0;
  RopeMode mode = RopeMode::Normal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;  // YaRN: 1 when enabled
  float attn_factor = 1.0f;
  int32_t corr_low = 0, corr_high = 0;
  bool unit_magnitude = false;  // ignore mscale: a pure rotation (the key shift)
};

// ggml_rope_yarn_corr_dims: the YaRN correction range for these settings.
void yarn_corr_dims(int n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow, int32_t* low,
                    int32_t* high);

// The parameters a ROPE node carries.
RopeParams rope_params_of(const Tensor& rope_node);

// Fills cs[2i] = cos, cs[2i+1] = sin for pairs i < n_rot/2 at `pos`.
// freq_factors may be null (all 1).
void rope_cos_sin(const RopeParams& p, float pos, const float* freq_factors, float* cs);

// Builds a ROPE node with every parameter (Graph::rope plus the YaRN fields).
Tensor* build_rope(Graph& g, Tensor* x, Tensor* pos, Tensor* freq_factors, const RopeParams& p);

}  // namespace opal
