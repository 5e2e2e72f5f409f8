// Compilation of one convolution (see compiled_conv.h).
#include "backends/rocket/lower/compiled_conv.h"

#include "backends/rocket/abi/regcmd.h"
#include "core/error.h"

namespace opal::rocket {

ConvOp lower_gemm(unsigned m, unsigned k, unsigned n, const QuantParams& q, Policy policy) {
  const unsigned rows = policy == Policy::Opal ? align_up(m, 4) : m;
  return ConvOp::gemm(rows, k, n, q);
}

CompiledConv compile_conv(const ConvOp& op, Policy policy, std::span<const uint8_t> host_weights,
                          std::span<const int32_t> host_bias) {
  CompiledConv c;
  c.op = op;
  c.policy = policy;
  c.plan = plan_tiles(op, policy);
  c.truncate_bits = mesa_truncate_bits(op.quant.weight_scale);
  c.out_cvt = mesa_out_cvt(op.quant, c.truncate_bits);
  if (op.int32_output) c.out_cvt = {0, 1, 0};  // unused by the int32 path; neutral values
  c.weights = pack_weights(op, host_weights);
  c.biases = pack_biases(op, host_bias, host_weights, c.truncate_bits);
  c.sizes = mesa_buffer_sizes(op);
  c.regcmd_size = 0;
  const uint32_t entries = uint32_t(build_task_stream({&c.op, &c.plan, {}, c.out_cvt, c.truncate_bits}, 0).size());
  c.regcmd_size = uint32_t(c.plan.tasks.size()) * align_up(entries * 8, abi::kRegcmdTaskAlignment);
  return c;
}

RegcmdBuffer build_regcmd(const CompiledConv& c, const BufferAddresses& addresses, uint32_t regcmd_iova) {
  TaskStreamParams p{&c.op, &c.plan, addresses, c.out_cvt, c.truncate_bits};
  std::vector<std::vector<uint64_t>> streams;
  for (size_t i = 0; i < c.plan.tasks.size(); i++) streams.push_back(build_task_stream(p, i));
  return assemble_regcmd(std::move(streams), regcmd_iova);
}

std::vector<BoPlacement> mesa_bo_sequence(const CompiledConv& c, uint32_t iova_base) {
  const ConvOp& op = c.op;
  std::vector<BoPlacement> bos = {
      {"teflon_weight_tensor", op.out_channels * op.taps() * op.in_channels, 0},
      {"teflon_bias_tensor", op.out_channels * 4, 0},
      {"weights", c.sizes.weights, 0},
      {"biases", c.sizes.biases, 0},
      {"input", c.sizes.input, 0},
      {"output", c.sizes.output, 0},
      {"regcmd", c.regcmd_size, 0},
  };
  uint64_t next = iova_base;
  for (BoPlacement& b : bos) {
    b.iova = uint32_t(next);
    next += (uint64_t(b.size) + 4095) / 4096 * 4096;
    if (next > (uint64_t(1) << 32)) fail("rocket: buffers exceed the 32-bit NPU address space");
  }
  return bos;
}

uint32_t iova_of(const std::vector<BoPlacement>& bos, const std::string& role) {
  for (const BoPlacement& b : bos)
    if (b.role == role) return b.iova;
  fail("rocket: no buffer with role '{}'", role);
}

BufferAddresses addresses_of(const std::vector<BoPlacement>& bos) {
  return {iova_of(bos, "input"), iova_of(bos, "output"), iova_of(bos, "weights"), iova_of(bos, "biases")};
}

}  // namespace opal::rocket
