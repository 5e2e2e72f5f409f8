// One convolution compiled for the NPU: tiling, packed weights and biases,
// output conversion, buffer sizes; and the regcmd buffer for a given
// placement of the buffers in NPU memory.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "backends/rocket/layout/packing.h"
#include "backends/rocket/lower/regcmd_builder.h"
#include "backends/rocket/lower/tiling.h"

namespace opal::rocket {

struct CompiledConv {
  ConvOp op;
  Policy policy = Policy::Mesa;
  TilePlan plan;
  unsigned truncate_bits = 0;
  OutCvt out_cvt;
  std::vector<uint8_t> weights;  // packed (written part of the weights BO)
  std::vector<int32_t> biases;
  BufferSizes sizes;  // BO sizes as Mesa allocates them
  uint32_t regcmd_size = 0;
};

// GEMM Y[M,N] = A[M,K] W[N,K]^T as a convolution. Policy::Opal pads M to a
// multiple of 4 (Mesa's surface stride is negative for M < 4); Policy::Mesa
// keeps M as it is.
ConvOp lower_gemm(unsigned m, unsigned k, unsigned n, const QuantParams& q, Policy policy);

// host_weights: uint8 [N][kw][kh][C]; host_bias: int32 [N].
CompiledConv compile_conv(const ConvOp& op, Policy policy, std::span<const uint8_t> host_weights,
                          std::span<const int32_t> host_bias);

RegcmdBuffer build_regcmd(const CompiledConv& c, const BufferAddresses& addresses, uint32_t regcmd_iova);

// Mesa's buffer creation order for one convolution under Teflon, with the
// 4 KiB-page bump placement used by the golden data (base 0x10000000 there;
// the real kernel's first-fit allocator starts at 0).
struct BoPlacement {
  std::string role;
  uint32_t size = 0;
  uint32_t iova = 0;
};
std::vector<BoPlacement> mesa_bo_sequence(const CompiledConv& c, uint32_t iova_base);
BufferAddresses addresses_of(const std::vector<BoPlacement>& bos);
uint32_t iova_of(const std::vector<BoPlacement>& bos, const std::string& role);

}  // namespace opal::rocket
