// Data layouts of the NPU buffers (byte-exact with Mesa's packers):
//
// input  (NC1HWC2, C2 = 16): byte[((u*W + x)*H + y)*16 + c] = host[x][y][16u + c] - 0x80,
//        channels past C hold (input zero point - 0x80). Host is uint8 [dims1=W][dims2=H][C];
//        a GEMM's A[M][K] is W = 1, H = M. The BO is allocated with 2x the channel groups.
// weights: [ceil(N'/32)][ceil(K'/32)][kw][kh][32 kernels][32 channels] of w - 0x80 with
//        N' = align2(N), K' = max(C, 16); the last kernel group holds only N' - 32g kernels,
//        the last channel group may be 16 wide (Mesa's rkt_fill_weights rules). Host is uint8
//        [N][kw][kh][C] (TFLite OHWI; a GEMM's W[N][K]).
// biases: int32 [N] = (bias - sum_k (w - w_zp)(in_zp - 0x80)) / 2^truncate_bits (C division).
// output (int8): byte[((g*H_out + y)*W_out + x)*16 + c] holds channel 16g + c; the host value
//        is byte + 0x80 as uint8. Channels up to align32(N) are written.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backends/rocket/op/conv_op.h"

namespace opal::rocket {

// Bytes Mesa allocates for each buffer (the "x2" headroom included).
struct BufferSizes {
  uint32_t weights = 0;
  uint32_t biases = 0;
  uint32_t input = 0;
  uint32_t output = 0;
};
BufferSizes mesa_buffer_sizes(const ConvOp& op);

// Packed input bytes (only the written part: ceil(C/16) * W * H * 16). `host`
// holds `host_height` rows (<= op.in_height); missing rows are padded with the
// input zero point (Opal pads a GEMM's M to a multiple of 4).
std::vector<uint8_t> pack_input(const ConvOp& op, std::span<const uint8_t> host, unsigned host_height);
std::vector<uint8_t> pack_weights(const ConvOp& op, std::span<const uint8_t> host);
std::vector<int32_t> pack_biases(const ConvOp& op, std::span<const int32_t> host_bias,
                                 std::span<const uint8_t> host_weights, unsigned truncate_bits);
// Reads a GEMM's int8 output as uint8 Y[rows][N] (Mesa's +0x80).
std::vector<uint8_t> unpack_gemm_output(const ConvOp& op, std::span<const uint8_t> bo, unsigned rows);

}  // namespace opal::rocket
