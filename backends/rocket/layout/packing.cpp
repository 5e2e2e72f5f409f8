// Packing of inputs, weights and biases into the NPU's formats (see packing.h).
#include "backends/rocket/layout/packing.h"

#include <algorithm>

#include "backends/rocket/abi/job.h"
#include "core/error.h"

namespace opal::rocket {

using abi::kFeatureAtomBytes;

BufferSizes mesa_buffer_sizes(const ConvOp& op) {
  BufferSizes s;
  const unsigned n2 = align_up(op.out_channels, 2);
  const unsigned k = std::max(op.in_channels, 16u);
  s.weights = op.taps() * n2 * align_up(k, 32) * 2;
  s.biases = op.out_channels * 4;
  s.input = op.in_width * op.in_height * div_up(op.in_channels, kFeatureAtomBytes) * 2 * kFeatureAtomBytes;
  s.output = op.out_width * op.out_height * div_up(op.out_channels, kFeatureAtomBytes) * 2 * kFeatureAtomBytes;
  if (op.int32_output) s.output *= 4;
  return s;
}

std::vector<uint8_t> pack_input(const ConvOp& op, std::span<const uint8_t> host, unsigned host_height) {
  const unsigned W = op.in_width, H = op.in_height, C = op.in_channels;
  if (host_height > H) fail("rocket: {} host rows for an input of height {}", host_height, H);
  if (host.size() != size_t(W) * host_height * C)
    fail("rocket: input has {} bytes, expected {}x{}x{}", host.size(), W, host_height, C);
  const unsigned groups = div_up(C, kFeatureAtomBytes);
  const uint8_t pad = uint8_t(op.quant.input_zero_point - 0x80);
  std::vector<uint8_t> out(size_t(groups) * W * H * kFeatureAtomBytes, pad);
  size_t n = 0;
  for (unsigned u = 0; u < groups; u++)
    for (unsigned x = 0; x < W; x++)
      for (unsigned y = 0; y < H; y++)
        for (unsigned c = 0; c < kFeatureAtomBytes; c++, n++) {
          const unsigned ch = u * kFeatureAtomBytes + c;
          if (ch < C && y < host_height) out[n] = uint8_t(host[(size_t(x) * host_height + y) * C + ch] - 0x80);
        }
  return out;
}

std::vector<uint8_t> pack_weights(const ConvOp& op, std::span<const uint8_t> host) {
  const unsigned N = op.out_channels, C = op.in_channels, KW = op.kernel_width, KH = op.kernel_height;
  if (host.size() != size_t(N) * KW * KH * C)
    fail("rocket: weights have {} bytes, expected {}x{}x{}x{}", host.size(), N, KW, KH, C);
  const unsigned n2 = align_up(N, 2);
  const unsigned k = std::max(C, 16u);
  const unsigned group = abi::kWeightAtomKernels;
  const unsigned channel_groups = div_up(k, group);
  const unsigned channels_in_group = std::min(k, group);
  const uint8_t zp = uint8_t(op.quant.weight_zero_point - 0x80);
  std::vector<uint8_t> out;
  out.reserve(size_t(op.taps()) * n2 * align_up(k, 32));
  for (unsigned g = 0; g < div_up(n2, group); g++)
    for (unsigned cg = 0; cg < channel_groups; cg++)
      for (unsigned x = 0; x < KW; x++)
        for (unsigned y = 0; y < KH; y++)
          for (unsigned o = 0; o < std::min(n2, group); o++)
            for (unsigned i = 0; i < channels_in_group; i++) {
              const unsigned oc = g * group + o, ic = cg * group + i;
              if (N > 2 && oc >= n2) continue;  // the last kernel group is only n2 - 32g wide
              if (oc >= N) {
                out.push_back(0);
              } else if (ic >= C) {
                // Padding channels: the first 16 of a group always, the rest only
                // when the real channels reach past the group's middle.
                if (i < 16 || C % 32 > 16) out.push_back(zp);
              } else {
                out.push_back(uint8_t(host[((size_t(oc) * KW + x) * KH + y) * C + ic] - 0x80));
              }
            }
  return out;
}

std::vector<int32_t> pack_biases(const ConvOp& op, std::span<const int32_t> host_bias,
                                 std::span<const uint8_t> host_weights, unsigned truncate_bits) {
  const unsigned N = op.out_channels;
  const size_t per_kernel = size_t(op.taps()) * op.in_channels;
  if (host_bias.size() != N) fail("rocket: {} biases for {} output channels", host_bias.size(), N);
  if (host_weights.size() != per_kernel * N) fail("rocket: weights size mismatch in bias correction");
  const int32_t in_offset = int32_t(op.quant.input_zero_point) - 0x80;
  const int32_t w_zp = op.quant.weight_zero_point;
  std::vector<int32_t> out(N);
  for (unsigned n = 0; n < N; n++) {
    // Mesa accumulates in 32-bit unsigned arithmetic: wrap like it does.
    uint32_t corr = 0;
    if (in_offset != 0)
      for (size_t i = 0; i < per_kernel; i++)
        corr += uint32_t((int32_t(host_weights[n * per_kernel + i]) - w_zp) * in_offset);
    const int32_t v = int32_t(uint32_t(host_bias[n]) - corr);
    out[n] = v / (int32_t(1) << truncate_bits);
  }
  return out;
}

std::vector<uint8_t> unpack_gemm_output(const ConvOp& op, std::span<const uint8_t> bo, unsigned rows) {
  const unsigned H = op.out_height, N = op.out_channels;
  if (op.out_width != 1) fail("rocket: unpack_gemm_output needs a width-1 output");
  if (bo.size() < size_t(div_up(N, 16)) * H * 16) fail("rocket: output buffer too small");
  std::vector<uint8_t> y(size_t(rows) * N);
  for (unsigned m = 0; m < rows; m++)
    for (unsigned n = 0; n < N; n++) y[size_t(m) * N + n] = uint8_t(bo[(size_t(n / 16) * H + m) * 16 + n % 16] + 0x80);
  return y;
}

}  // namespace opal::rocket
