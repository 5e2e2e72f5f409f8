// Scale searches shared by the K-quant reference quantizers (k_quants.cpp). They
// follow llama.cpp's make_qx_quants / make_q3_quants / make_qkx2_quants (same
// candidate scales, same weights, same f32 operation order) so that Opal's K-quant
// files match llama-quantize's error without an importance matrix.
#pragma once
#include <cstdint>
#include <cstring>

namespace opal::quant {

// Round to nearest, ties to even, for |x| <= 2^22 (ggml's nearest_int: adding
// 1.5 * 2^23 leaves the rounded integer in the low mantissa bits).
inline int nearest_int(float x) {
  const float v = x + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// Symmetric quants in [-nmax, nmax-1], stored biased by nmax in L. Tries the
// scale that maps the signed abs-max to -nmax and 18 nearby ones (nmax ± 0.1·k),
// keeping the least-squares scale with the smallest weighted error; weights are
// x² (rmse_type 1) when qw is null. Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw);

// As make_qx_quants for Q3_K (nmax 4) but refines the quants one at a time
// (up to 5 sweeps) with weights x²; returns the least-squares scale. Without
// do_rmse, plain rounding at the abs-max scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L, bool do_rmse);

// Asymmetric quants in [0, nmax] with a minimum: x ≈ scale*L - the_min. Starts
// from (max - min) / nmax, then tries nstep+1 scales (rmin + rdelta*k + nmax) /
// (max - min), refitting scale and min by weighted least squares, keeping the
// smallest weighted squared (or absolute, use_mad) error. min is clamped <= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad);

}  // namespace opal::quant
