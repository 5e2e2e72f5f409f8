// What the NPU is asked to compute: one INT8 convolution, of which GEMM is the
// 1x1 special case. Sizes use Mesa's naming: "width" is tensor dims[1] and
// "height" is dims[2]; a GEMM Y[M,N] = A[M,K] * W[N,K]^T is width 1, height M,
// K input channels and N output channels (kernels).
#pragma once
#include <cstdint>

namespace opal::rocket {

// Per-tensor quantisation as TFLite/Teflon hands it over: uint8 tensors with a
// zero point; 128 means symmetric int8.
struct QuantParams {
  float input_scale = 1.0f;
  float weight_scale = 1.0f;
  float output_scale = 1.0f;
  uint8_t input_zero_point = 128;
  uint8_t weight_zero_point = 128;
  uint8_t output_zero_point = 128;
};

struct ConvOp {
  unsigned in_width = 1, in_height = 1, in_channels = 1;
  unsigned out_width = 1, out_height = 1, out_channels = 1;
  unsigned kernel_width = 1, kernel_height = 1;  // dims[1], dims[2] of the weight tensor
  unsigned stride = 1;
  bool padding_same = false;
  QuantParams quant;
  // Output precision: int8 through OUT_CVT (Mesa) or the exact int32
  // accumulator (DPU_DATA_FORMAT.OUT_PRECISION = 4, 4 channels per 16-byte
  // atom), which Opal's LLM path uses and dequantizes on the host.
  bool int32_output = false;

  // GEMM as a 1x1 convolution over a 1 x M image with K channels.
  static ConvOp gemm(unsigned m, unsigned k, unsigned n, const QuantParams& q);
  // A square-kernel convolution with TFLite VALID or SAME padding.
  static ConvOp conv(unsigned width, unsigned height, unsigned in_channels, unsigned out_channels, unsigned kernel,
                     unsigned stride, bool padding_same, const QuantParams& q);

  // Throws opal::Error naming the unsupported property (single-channel input,
  // non-square images, strides > 7, K beyond the per-task limit, ...).
  void validate() const;

  unsigned taps() const { return kernel_width * kernel_height; }
};

struct Padding {
  unsigned top = 0, bottom = 0, left = 0, right = 0;
};
// Explicit padding of a SAME convolution, in Mesa's assignment of axes.
Padding explicit_padding(const ConvOp& op);

constexpr unsigned align_up(unsigned v, unsigned a) { return (v + a - 1) / a * a; }
constexpr unsigned div_up(unsigned v, unsigned d) { return (v + d - 1) / d; }

}  // namespace opal::rocket
