// Per-task register programming for an INT8 convolution (see regcmd_builder.h).
// The emission order, the duplicated writes (CBUF_CON0, CONV_CON1,
// DCOMP_CTRL, DCOMP_REGNUM), the raw zero writes to undocumented CORE 0x3030
// and DPU 0x40c4 and the magic constants follow Mesa's rkt_regcmd.c so the
// streams compare entry for entry; the field values come from the task tile.
#include "backends/rocket/lower/regcmd_builder.h"

#include <bit>
#include <cmath>

#include "backends/rocket/abi/regcmd.h"
#include "core/error.h"

namespace opal::rocket {
namespace {

using namespace abi;

class Emitter {
 public:
  explicit Emitter(std::vector<uint64_t>& out) : out_(out) {}
  void operator()(uint16_t offset, uint32_t value) {
    const RegisterInfo* r = find_register(offset);
    if (!r) fail("rocket builder: no register at 0x{:04x}", offset);
    out_.push_back(encode_entry(r->block, offset, value));
  }
  void raw(uint64_t e) { out_.push_back(e); }

 private:
  std::vector<uint64_t>& out_;
};

}  // namespace

unsigned mesa_truncate_bits(float weight_scale) {
  static constexpr uint32_t kWhitelist[] = {0x3a88323f, 0x3c0060de, 0x3c06022d, 0x3c1642e3, 0x3c1e3f51,
                                            0x3c5c8aa8, 0x3c615e93, 0x3c7326a2, 0x3c783013, 0x3d1748e6,
                                            0x3d282992, 0x3d2e87ae, 0x3d77f5f6, 0x3a9a5956, 0x3caebc56};
  const uint32_t bits = std::bit_cast<uint32_t>(weight_scale);
  for (uint32_t w : kWhitelist)
    if (w == bits) return 1;
  return 0;
}

OutCvt mesa_out_cvt(const QuantParams& q, unsigned truncate_bits) {
  // f32 arithmetic throughout, as Mesa computes it.
  const float product = q.input_scale * q.weight_scale;
  const float s = product / q.output_scale;
  const uint32_t bits = std::bit_cast<uint32_t>(s);
  unsigned shift = 127 + 31 - 32 - (bits >> 23) + 16;  // 142 - biased exponent
  if (truncate_bits > 0) shift--;
  unsigned scale = ((bits >> 9) & 0x7fff) + 1;
  if (scale < (1u << 14)) scale |= 1u << 14;
  OutCvt c;
  c.offset = uint32_t(int32_t(q.output_zero_point) - 0x80);
  c.scale = scale;
  c.shift = shift - 1;
  return c;
}

std::vector<uint64_t> build_task_stream(const TaskStreamParams& p, size_t index) {
  const ConvOp& op = *p.op;
  const TilePlan& plan = *p.plan;
  const TaskTile& t = plan.tasks.at(index);
  std::vector<uint64_t> out;
  out.reserve(130);
  Emitter emit(out);

  const unsigned in_channels = align_up(std::max(op.in_channels, 16u), 16);
  const unsigned kernels = align_up(t.kernels, 2);  // WEIGHT_KERNELS
  const unsigned out_channels = align_up(std::max(t.kernels, 32u), 32);
  const unsigned bytes_per_kernel = op.taps() * in_channels;
  const unsigned line_stride = op.in_width * kFeatureAtomBytes / 4;
  // Mesa computes the surface stride in float over the *whole* tensor height;
  // for height < 4 it is negative and wraps (M = 1 gives 0x0ffffffd).
  const int surface_stride = int(float(line_stride) * (float(op.in_height) / 4.0f - 1.0f));
  const unsigned out_surface_stride = op.out_width * op.out_height;  // 16-byte atoms per surface
  const unsigned data_entries = div_up(op.in_width * 2 * div_up(op.in_channels, kFeatureAtomBytes), 8);
  const unsigned surfaces_per_row = op.out_width * op.out_height * 2;
  const uint8_t in_zp = op.quant.input_zero_point;
  const uint8_t w_zp = op.quant.weight_zero_point;

  uint32_t cbuf_con0 = fld::CBUF_CON0_WEIGHT_BANK(t.weight_banks) | fld::CBUF_CON0_DATA_BANK(t.data_banks);
  if (t.weight_reuse) cbuf_con0 |= fld::CBUF_CON0_WEIGHT_REUSE(1);
  const uint32_t conv_con1 = 0;  // direct convolution, int8 in and proc precision

  emit(reg::CNA_CBUF_CON0, cbuf_con0);
  emit(reg::CNA_DCOMP_REGNUM, 0);
  emit(reg::CNA_DCOMP_CTRL, 0);
  emit(reg::CNA_CONV_CON1, conv_con1);
  const uint32_t s_pointer =
      fld::S_POINTER_POINTER_PP_MODE(1) | fld::S_POINTER_EXECUTER_PP_EN(1) | fld::S_POINTER_POINTER_PP_EN(1);
  emit(reg::DPU_S_POINTER, s_pointer);
  emit(reg::RDMA_S_POINTER, s_pointer);
  emit(reg::CNA_CONV_CON1, conv_con1);
  emit(reg::CNA_CONV_CON2, fld::CONV_CON2_FEATURE_GRAINS(50 + op.stride + 1));  // Mesa's magic value
  emit(reg::CNA_CONV_CON3, fld::CONV_CON3_CONV_X_STRIDE(op.stride) | fld::CONV_CON3_CONV_Y_STRIDE(op.stride));
  emit(reg::CNA_DATA_SIZE0, fld::DATA_SIZE0_DATAIN_WIDTH(op.in_width) | fld::DATA_SIZE0_DATAIN_HEIGHT(t.in_height));
  emit(reg::CNA_DATA_SIZE1,
       fld::DATA_SIZE1_DATAIN_CHANNEL_REAL(op.in_channels - 1) | fld::DATA_SIZE1_DATAIN_CHANNEL(in_channels));
  emit(reg::CNA_DATA_SIZE2, fld::DATA_SIZE2_DATAOUT_WIDTH(t.out_width));
  emit(reg::CNA_DATA_SIZE3, fld::DATA_SIZE3_DATAOUT_ATOMICS(t.out_width * t.out_height));
  emit(reg::CNA_WEIGHT_SIZE0, bytes_per_kernel * kernels);
  emit(reg::CNA_WEIGHT_SIZE1, bytes_per_kernel);
  emit(reg::CNA_WEIGHT_SIZE2, fld::WEIGHT_SIZE2_WEIGHT_WIDTH(op.kernel_width) |
                                  fld::WEIGHT_SIZE2_WEIGHT_HEIGHT(op.kernel_height) |
                                  fld::WEIGHT_SIZE2_WEIGHT_KERNELS(kernels));
  emit(reg::CNA_CBUF_CON0, cbuf_con0);
  emit(reg::CNA_CBUF_CON1, fld::CBUF_CON1_DATA_ENTRIES(data_entries));
  emit(reg::CNA_CVT_CON0, fld::CVT_CON0_DATA_SIGN(1) | fld::CVT_CON0_CVT_TYPE(1) | fld::CVT_CON0_CVT_BYPASS(1));
  for (uint16_t r = reg::CNA_CVT_CON1; r <= reg::CNA_CVT_CON4; r += 4) emit(r, fld::CVT_CONx_SCALE(1));
  emit(reg::CNA_FC_CON0, 0);
  emit(reg::CNA_FC_CON1, 0);
  emit(reg::CNA_PAD_CON0, fld::PAD_CON0_PAD_LEFT(t.pad_left) | fld::PAD_CON0_PAD_TOP(t.pad_top));
  emit(reg::CNA_FEATURE_DATA_ADDR, p.addresses.input + t.input_offset);
  emit(reg::CNA_FC_CON2, 0);
  emit(reg::CNA_DMA_CON0, fld::DMA_CON0_WEIGHT_BURST_LEN(15) | fld::DMA_CON0_DATA_BURST_LEN(15));
  emit(reg::CNA_DMA_CON1, fld::DMA_CON1_LINE_STRIDE(line_stride));
  emit(reg::CNA_DMA_CON2, fld::DMA_CON2_SURF_STRIDE(uint32_t(surface_stride)));
  emit(reg::CNA_FC_DATA_SIZE0, fld::FC_DATA_SIZE0_DMA_WIDTH(op.in_width) | fld::FC_DATA_SIZE0_DMA_HEIGHT(t.in_height));
  emit(reg::CNA_FC_DATA_SIZE1, fld::FC_DATA_SIZE1_DMA_CHANNEL(in_channels));
  emit(reg::CNA_DCOMP_CTRL, 0);
  emit(reg::CNA_DCOMP_REGNUM, 0);
  // Kernels are packed in groups of 32 (bytes_per_kernel each): tile n0 starts n0 kernels in.
  emit(reg::CNA_DCOMP_ADDR0, p.addresses.weights + t.first_kernel * bytes_per_kernel);
  for (unsigned i = 0; i < 16; i++) emit(uint16_t(reg::CNA_DCOMP_AMOUNT0 + 4 * i), 0);
  emit(reg::CNA_CVT_CON5, 0);
  uint32_t pad_value = uint32_t(int32_t(in_zp) - 0x80);
  if (op.kernel_width >= 3 && in_zp == 0) pad_value = 0xffff8080u;  // Mesa's special case
  emit(reg::CNA_PAD_CON1, pad_value);

  emit(reg::CORE_MISC_CFG, fld::MISC_CFG_QD_EN(1));
  emit(reg::CORE_DATAOUT_SIZE_0,
       fld::DATAOUT_SIZE_0_HEIGHT(t.out_height - 1) | fld::DATAOUT_SIZE_0_WIDTH(t.out_width - 1));
  emit(reg::CORE_DATAOUT_SIZE_1, fld::DATAOUT_SIZE_1_CHANNEL(out_channels - 1));
  emit(reg::CORE_CLIP_TRUNCATE, fld::CLIP_TRUNCATE_CLIP_TRUNCATE(p.truncate_bits));
  emit.raw(encode_entry(Block::CORE, reg::CORE_UNDOCUMENTED_3030, 0));

  emit(reg::DPU_FEATURE_MODE_CFG, fld::FEATURE_MODE_CFG_BURST_LEN(15) | fld::FEATURE_MODE_CFG_OUTPUT_MODE(2));
  // int32 output: the accumulator plus bias, unconverted (mtx512's int8 GEMM programming).
  emit(reg::DPU_DATA_FORMAT, op.int32_output ? fld::DATA_FORMAT_OUT_PRECISION(uint32_t(Precision::Int32)) : 0);
  emit(reg::DPU_OFFSET_PEND, 0);
  emit(reg::DPU_DST_BASE_ADDR, p.addresses.output + t.output_offset);
  emit(reg::DPU_DST_SURF_STRIDE, fld::DST_SURF_STRIDE_STRIDE(out_surface_stride));
  emit(reg::DPU_DATA_CUBE_WIDTH, fld::DATA_CUBE_WIDTH_WIDTH(t.out_width - 1));
  emit(reg::DPU_DATA_CUBE_HEIGHT, fld::DATA_CUBE_HEIGHT_HEIGHT(t.out_height - 1));
  emit(reg::DPU_DATA_CUBE_NOTCH_ADDR, 0);
  emit(reg::DPU_DATA_CUBE_CHANNEL,
       fld::DATA_CUBE_CHANNEL_ORIG_CHANNEL(t.kernels - 1) | fld::DATA_CUBE_CHANNEL_CHANNEL(out_channels - 1));
  emit(reg::DPU_BS_CFG,
       fld::BS_CFG_ALU_ALGO(2) | fld::BS_CFG_ALU_SRC(1) | fld::BS_CFG_RELU_BYPASS(1) | fld::BS_CFG_MUL_BYPASS(1));
  emit(reg::DPU_BS_ALU_CFG, 0);
  emit(reg::DPU_BS_MUL_CFG, 0);
  emit(reg::DPU_BS_RELUX_CMP_VALUE, 0);
  // SIZE_E 1/1/1 as Mesa; mtx512 programs 7/7/7 for int32 output [R, unverified].
  const uint32_t size_e = op.int32_output ? 7 : 1;
  emit(reg::DPU_BS_OW_CFG,
       fld::BS_OW_CFG_SIZE_E_2(size_e) | fld::BS_OW_CFG_SIZE_E_1(size_e) | fld::BS_OW_CFG_SIZE_E_0(size_e));
  emit(reg::DPU_BS_OW_OP, fld::BS_OW_OP_OW_OP(uint32_t(0x80 - int(w_zp))));
  emit(reg::DPU_WDMA_SIZE_0, fld::WDMA_SIZE_0_CHANNEL(out_channels - 1));
  emit(reg::DPU_WDMA_SIZE_1, fld::WDMA_SIZE_1_HEIGHT(t.out_height - 1) | fld::WDMA_SIZE_1_WIDTH(t.out_width - 1));
  emit(reg::DPU_BN_CFG,
       fld::BN_CFG_RELU_BYPASS(1) | fld::BN_CFG_MUL_BYPASS(1) | fld::BN_CFG_ALU_BYPASS(1) | fld::BN_CFG_BYPASS(1));
  emit(reg::DPU_BN_ALU_CFG, 0);
  emit(reg::DPU_BN_MUL_CFG, 0);
  emit(reg::DPU_BN_RELUX_CMP_VALUE, 0);
  emit(reg::DPU_EW_CFG, fld::EW_CFG_RELU_BYPASS(1) | fld::EW_CFG_OP_CVT_BYPASS(1) | fld::EW_CFG_LUT_BYPASS(1) |
                            fld::EW_CFG_OP_BYPASS(1) | fld::EW_CFG_BYPASS(1));
  emit(reg::DPU_EW_CVT_OFFSET_VALUE, 0);
  emit(reg::DPU_EW_CVT_SCALE_VALUE, fld::EW_CVT_SCALE_VALUE_SCALE(1));
  emit(reg::DPU_EW_RELUX_CMP_VALUE, 0);
  emit(reg::DPU_OUT_CVT_OFFSET, p.out_cvt.offset);
  emit(reg::DPU_OUT_CVT_SCALE, fld::OUT_CVT_SCALE_SCALE(p.out_cvt.scale));
  emit(reg::DPU_OUT_CVT_SHIFT, fld::OUT_CVT_SHIFT_SHIFT(p.out_cvt.shift));
  for (unsigned i = 0; i < 8; i++) emit(uint16_t(reg::DPU_EW_OP_VALUE_0 + 4 * i), 0);
  emit(reg::DPU_SURFACE_ADD, fld::SURFACE_ADD_SURF_ADD(surfaces_per_row));
  emit.raw(encode_entry(Block::DPU, reg::DPU_UNDOCUMENTED_40C4, 0));
  for (uint16_t r = reg::DPU_LUT_ACCESS_CFG; r <= reg::DPU_LUT_LO_SLOPE_SHIFT; r += 4) emit(r, 0);

  emit(reg::RDMA_DATA_CUBE_WIDTH, fld::RDMA_DATA_CUBE_WIDTH_WIDTH(t.out_width - 1));
  emit(reg::RDMA_DATA_CUBE_HEIGHT, fld::RDMA_DATA_CUBE_HEIGHT_HEIGHT(t.out_height - 1));
  emit(reg::RDMA_DATA_CUBE_CHANNEL, fld::RDMA_DATA_CUBE_CHANNEL_CHANNEL(out_channels - 1));
  emit(reg::RDMA_SRC_BASE_ADDR, 0);
  emit(reg::RDMA_BRDMA_CFG, fld::BRDMA_CFG_DATA_USE(1));
  emit(reg::RDMA_BS_BASE_ADDR, p.addresses.biases + 4 * t.first_kernel);
  emit(reg::RDMA_NRDMA_CFG, 0);
  emit(reg::RDMA_BN_BASE_ADDR, 0);
  emit(reg::RDMA_ERDMA_CFG, fld::ERDMA_CFG_DISABLE(1));
  emit(reg::RDMA_EW_BASE_ADDR, 0);
  emit(reg::RDMA_EW_SURF_STRIDE, 0);
  emit(reg::RDMA_FEATURE_MODE_CFG,
       fld::RDMA_FEATURE_MODE_CFG_BURST_LEN(15) | fld::RDMA_FEATURE_MODE_CFG_MRDMA_DISABLE(1));
  emit(reg::RDMA_SRC_DMA_CFG, 0);
  emit(reg::RDMA_SURF_NOTCH, 0);
  emit(reg::RDMA_PAD_CFG, 0);
  emit(reg::RDMA_WEIGHT, fld::RDMA_WEIGHT_E(1) | fld::RDMA_WEIGHT_N(1) | fld::RDMA_WEIGHT_B(1) | fld::RDMA_WEIGHT_M(1));
  emit(reg::RDMA_EW_SURF_NOTCH, 0);

  // Tail: next-task address slot (a no-op for a single-task op), amount, op_en.
  if (plan.tasks.size() == 1) emit.raw(0);
  else emit(reg::PC_BASE_ADDRESS, 0);
  emit(reg::PC_REGISTER_AMOUNTS, 0);
  emit.raw(kTailPreOpEnable);
  emit.raw(encode_entry(kTailOpEnableTarget, reg::PC_OPERATION_ENABLE, kMesaOpEnableMask));
  return out;
}

uint32_t regcmd_buffer_size(const std::vector<std::vector<uint64_t>>& streams) {
  uint32_t size = 0;
  for (const auto& s : streams) size += align_up(uint32_t(s.size() * 8), kRegcmdTaskAlignment);
  return size;
}

RegcmdBuffer assemble_regcmd(std::vector<std::vector<uint64_t>> streams, uint32_t regcmd_iova) {
  RegcmdBuffer buf;
  buf.bytes.assign(regcmd_buffer_size(streams), 0);
  uint32_t offset = 0;
  for (size_t i = 0; i < streams.size(); i++) {
    std::vector<uint64_t>& s = streams[i];
    if (s.size() < kTailEntries) fail("rocket builder: task {} has {} entries, fewer than the tail", i, s.size());
    const uint32_t size = uint32_t(s.size() * 8);
    if (i + 1 < streams.size()) {
      const uint64_t next = uint64_t(regcmd_iova) + offset + align_up(size, kRegcmdTaskAlignment);
      s[s.size() - 4] |= next << 16;
      s[s.size() - 3] |= uint64_t(mesa_next_amount(uint32_t(streams[i + 1].size()))) << 16;
    }
    for (size_t e = 0; e < s.size(); e++) {
      const uint64_t v = s[e];
      for (int b = 0; b < 8; b++) buf.bytes[offset + e * 8 + b] = uint8_t(v >> (8 * b));
    }
    buf.offsets.push_back(offset);
    buf.counts.push_back(uint32_t(s.size()));
    buf.entries.insert(buf.entries.end(), s.begin(), s.end());
    offset += align_up(size, kRegcmdTaskAlignment);
  }
  return buf;
}

std::vector<abi::JobDesc> make_jobs(const TilePlan& plan, const RegcmdBuffer& regcmd, uint32_t regcmd_iova,
                                    uint32_t input_handle, uint32_t output_handle) {
  std::vector<abi::JobDesc> jobs;
  for (const auto& ids : plan.jobs) {
    abi::JobDesc job;
    for (unsigned i : ids) job.tasks.push_back({regcmd_iova + regcmd.offsets.at(i), regcmd.counts.at(i)});
    job.in_bo_handles = {input_handle};
    job.out_bo_handles = {output_handle};
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace opal::rocket
