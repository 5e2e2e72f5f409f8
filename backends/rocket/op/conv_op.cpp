// ConvOp construction and the subset of convolutions the builder supports.
#include "backends/rocket/op/conv_op.h"

#include <algorithm>

#include "backends/rocket/abi/job.h"
#include "core/error.h"

namespace opal::rocket {

ConvOp ConvOp::gemm(unsigned m, unsigned k, unsigned n, const QuantParams& q) {
  ConvOp op;
  op.in_width = 1;
  op.in_height = m;
  op.in_channels = k;
  op.out_width = 1;
  op.out_height = m;
  op.out_channels = n;
  op.quant = q;
  return op;
}

ConvOp ConvOp::conv(unsigned width, unsigned height, unsigned in_channels, unsigned out_channels, unsigned kernel,
                    unsigned stride, bool padding_same, const QuantParams& q) {
  ConvOp op;
  op.in_width = width;
  op.in_height = height;
  op.in_channels = in_channels;
  op.out_channels = out_channels;
  op.kernel_width = op.kernel_height = kernel;
  op.stride = stride;
  op.padding_same = padding_same;
  if (stride == 0) fail("rocket: convolution stride 0");
  if (padding_same) {
    op.out_width = div_up(width, stride);
    op.out_height = div_up(height, stride);
  } else {
    if (kernel > width || kernel > height) fail("rocket: kernel {} larger than the {}x{} input", kernel, width, height);
    op.out_width = (width - kernel) / stride + 1;
    op.out_height = (height - kernel) / stride + 1;
  }
  op.quant = q;
  return op;
}

void ConvOp::validate() const {
  if (in_width == 0 || in_height == 0 || in_channels == 0 || out_channels == 0 || out_width == 0 || out_height == 0)
    fail("rocket: empty convolution ({}x{}x{} -> {} channels)", in_width, in_height, in_channels, out_channels);
  if (in_channels % 16 != 0)
    fail(
        "rocket: {} input channels: Opal's builder needs a multiple of 16 (Mesa's weight packing is "
        "inconsistent with WEIGHT_BYTES_PER_KERNEL otherwise)",
        in_channels);
  if (in_channels < 2) fail("rocket: single-channel input (Mesa's image path) is not supported by Opal's builder");
  if (in_width != 1 && in_width != in_height)
    fail(
        "rocket: input {}x{}: only square images or width 1 (GEMM) are supported; Mesa transposes "
        "non-square images between packing and unpacking",
        in_width, in_height);
  if (kernel_width != kernel_height) fail("rocket: non-square kernel {}x{}", kernel_width, kernel_height);
  if (stride < 1 || stride > 7) fail("rocket: stride {} outside 1..7 (CNA_CONV_CON3 field)", stride);
  if (in_width > 2047 || in_height > 2047)
    fail("rocket: input {}x{} exceeds the 11-bit CNA_DATA_SIZE0 fields (2047)", in_width, in_height);
  if (align_up(std::max(out_channels, 32u), 32) > 8192)
    fail("rocket: {} output channels exceed the 13-bit DPU channel fields (8192)", out_channels);
  const unsigned reduction = taps() * align_up(in_channels, 16);
  if (reduction > abi::kMaxReduction)
    fail("rocket: reduction length {} (kernel {}x{} x {} channels) exceeds {} per task", reduction, kernel_width,
         kernel_height, in_channels, abi::kMaxReduction);
}

Padding explicit_padding(const ConvOp& op) {
  Padding p;
  if (!op.padding_same || op.kernel_width <= 1) return p;
  // Mesa pairs the axes crosswise (left/right from the height, top/bottom from
  // the width); with square images this is the TFLite SAME padding.
  const int along_w = std::max<int>(int((op.out_width - 1) * op.stride + op.kernel_width) - int(op.in_width), 0);
  const int along_h = std::max<int>(int((op.out_height - 1) * op.stride + op.kernel_height) - int(op.in_height), 0);
  p.left = unsigned(along_h / 2);
  p.right = unsigned(along_h) - p.left;
  p.top = unsigned(along_w / 2);
  p.bottom = unsigned(along_w) - p.top;
  return p;
}

}  // namespace opal::rocket
