// NPU emulator (see npu_emulator.h): per task, fetch the regcmd entries from
// NPU memory, apply them to a register file (last write wins), check the tail,
// the CBUF bank split, alignment and shape limits, then run the convolution:
// gather the task's input window and the packed weights into dense int8
// arrays, accumulate in int64 (exact), convert and scatter to the output.
#include "backends/rocket/driver/emulator/npu_emulator.h"

#include <algorithm>
#include <array>
#include <limits>

#include "backends/rocket/abi/regcmd.h"
#include "core/error.h"

namespace opal::rocket {
namespace {

using namespace abi;

constexpr size_t kRegisterSlots = 0x6000 / 4;

class RegisterFile {
 public:
  void write(uint16_t offset, uint32_t value) {
    values_[offset / 4] = value;
    written_[offset / 4] = true;
  }
  uint32_t operator[](uint16_t offset) const { return values_[offset / 4]; }
  bool written(uint16_t offset) const { return written_[offset / 4]; }

 private:
  std::array<uint32_t, kRegisterSlots> values_{};
  std::array<bool, kRegisterSlots> written_{};
};

int32_t sat32(int64_t v) {
  return int32_t(std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

// Everything the convolution needs, decoded from the registers.
struct Decoded {
  unsigned in_w, in_h, channels, channels_real;
  unsigned kw, kh, kernels, stride_x, stride_y;
  unsigned pad_top, pad_left;
  int8_t pad_value;
  unsigned out_w, out_h, out_channels, orig_channels;
  uint32_t input_addr, weight_addr, dst_addr, bias_addr;
  uint64_t line_pitch, surface_pitch, out_surface_pitch;
  uint32_t weight_bytes;
  unsigned truncate;
  bool bias_enabled;
  bool int32_out;
  uint32_t cvt_scale, cvt_shift;
  int32_t cvt_offset;
  unsigned data_banks, weight_banks;
  bool weight_reuse;
};

class TaskRunner {
 public:
  TaskRunner(NpuMemory& mem, const EmulatorOptions& opt, std::vector<std::string>& warnings, unsigned job,
             unsigned task)
      : mem_(mem), opt_(opt), warnings_(warnings), job_(job), task_(task) {}

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("rocket emulator: job {} task {}: {}", job_, task_, fmt::format(f, std::forward<Args>(args)...));
  }

  void load(const TaskDesc& desc, RegisterFile& regs) {
    if (desc.regcmd_count == 0) error("regcmd_count is 0 (the kernel rejects the job)");
    if (desc.regcmd_iova % 16 != 0) error("regcmd address 0x{:08x} is not 16-byte aligned", desc.regcmd_iova);
    const uint8_t* p = mem_.resolve(desc.regcmd_iova, uint64_t(desc.regcmd_count) * 8);
    if (!p)
      error("regcmd 0x{:08x} + {} entries lies outside every buffer (IOMMU fault)", desc.regcmd_iova,
            desc.regcmd_count);
    std::vector<uint64_t> entries(desc.regcmd_count);
    for (size_t i = 0; i < entries.size(); i++) {
      uint64_t v = 0;
      for (int b = 7; b >= 0; b--) v = (v << 8) | p[i * 8 + b];
      entries[i] = v;
    }
    check_tail(entries);
    for (size_t i = 0; i + kTailEntries < entries.size(); i++) {
      if (entries[i] == 0) continue;
      const RegcmdEntry e = decode_entry(entries[i]);
      const RegisterInfo* r = find_register(e.offset);
      if (!r)
        error("entry {}: unknown register 0x{:04x} (target 0x{:04x}, value 0x{:08x})", i, e.offset, e.target, e.value);
      if (e.target != target_of(r->block))
        error("entry {}: register {} belongs to {} (target 0x{:04x}) but the entry targets 0x{:04x}", i, r->name,
              block_name(r->block), target_of(r->block), e.target);
      regs.write(e.offset, e.value);
    }
  }

  void check_tail(const std::vector<uint64_t>& entries) {
    const size_t n = entries.size();
    if (n < kTailEntries + 1) error("{} regcmd entries: no room for a task body and the 4-entry PC tail", n);
    const RegcmdEntry op_en = decode_entry(entries[n - 1]);
    const bool tail_ok = op_en.target == kTailOpEnableTarget && op_en.offset == reg::PC_OPERATION_ENABLE &&
                         entries[n - 2] == kTailPreOpEnable &&
                         decode_entry(entries[n - 3]).target == target_of(Block::PC) &&
                         decode_entry(entries[n - 3]).offset == reg::PC_REGISTER_AMOUNTS;
    if (!tail_ok)
      error(
          "regcmd does not end in the PC tail (PC_BASE_ADDRESS, PC_REGISTER_AMOUNTS, 0x0041..., "
          "PC_OPERATION_ENABLE): the PC never sets OPERATION_ENABLE and the job times out");
    const RegcmdEntry next = decode_entry(entries[n - 4]);
    if (entries[n - 4] != 0 && !(next.target == target_of(Block::PC) && next.offset == reg::PC_BASE_ADDRESS))
      error("tail entry {} is neither 0 nor PC_BASE_ADDRESS", n - 4);
    if (next.value % 16 != 0) error("PC_BASE_ADDRESS 0x{:08x} (next task) is not 16-byte aligned", next.value);
    if (!fld::PC_OPERATION_ENABLE_OP_EN.get(op_en.value) || (op_en.value & 0x0c) != 0x0c)
      error("PC_OPERATION_ENABLE mask 0x{:x} does not enable CNA and DPU: no DPU interrupt, the job times out",
            op_en.value);
  }

  Decoded decode(const RegisterFile& regs, const TaskSummary* prev) {
    using namespace reg;
    for (uint16_t r :
         {CNA_DATA_SIZE0, CNA_DATA_SIZE1, CNA_WEIGHT_SIZE0, CNA_WEIGHT_SIZE1, CNA_WEIGHT_SIZE2, CNA_CBUF_CON0,
          CNA_FEATURE_DATA_ADDR, CNA_DCOMP_ADDR0, CNA_DMA_CON1, CNA_DMA_CON2, CORE_DATAOUT_SIZE_0, CORE_DATAOUT_SIZE_1,
          DPU_DST_BASE_ADDR, DPU_DST_SURF_STRIDE, DPU_DATA_CUBE_CHANNEL, DPU_OUT_CVT_SCALE})
      if (!regs.written(r)) error("{} was never written", register_name(r));
    Decoded d{};
    const uint32_t con1 = regs[CNA_CONV_CON1];
    if (fld::CONV_CON1_CONV_MODE.get(con1) != 0 || fld::CONV_CON1_DECONV.get(con1) != 0)
      error("CNA_CONV_CON1 0x{:08x}: only direct convolution (CONV_MODE 0) is emulated", con1);
    if (fld::CONV_CON1_IN_PRECISION.get(con1) != 0 || fld::CONV_CON1_PROC_PRECISION.get(con1) != 0)
      error("CNA_CONV_CON1 0x{:08x}: only int8 input and processing precision are emulated", con1);
    if (fld::CONV_CON1_NONALIGN_DMA.get(con1) || fld::CONV_CON1_ARGB_IN.get(con1))
      error("CNA_CONV_CON1 0x{:08x}: the single-channel image path is not emulated", con1);
    const uint32_t con3 = regs[CNA_CONV_CON3];
    d.stride_x = fld::CONV_CON3_CONV_X_STRIDE.get(con3);
    d.stride_y = fld::CONV_CON3_CONV_Y_STRIDE.get(con3);
    if (d.stride_x == 0 || d.stride_y == 0) error("CNA_CONV_CON3 0x{:08x}: stride 0", con3);
    if (fld::CONV_CON3_ATROUS_X_DILATION.get(con3) || fld::CONV_CON3_ATROUS_Y_DILATION.get(con3))
      error("CNA_CONV_CON3 0x{:08x}: dilation is not emulated", con3);

    d.in_w = fld::DATA_SIZE0_DATAIN_WIDTH.get(regs[CNA_DATA_SIZE0]);
    d.in_h = fld::DATA_SIZE0_DATAIN_HEIGHT.get(regs[CNA_DATA_SIZE0]);
    if (d.in_w == 0 || d.in_h == 0) error("CNA_DATA_SIZE0: empty input {}x{}", d.in_w, d.in_h);
    d.channels = fld::DATA_SIZE1_DATAIN_CHANNEL.get(regs[CNA_DATA_SIZE1]);
    d.channels_real = fld::DATA_SIZE1_DATAIN_CHANNEL_REAL.get(regs[CNA_DATA_SIZE1]) + 1;
    if (d.channels == 0 || d.channels % 16 != 0 || d.channels < d.channels_real)
      error("CNA_DATA_SIZE1: DATAIN_CHANNEL {} must be a non-zero multiple of 16 covering DATAIN_CHANNEL_REAL {}",
            d.channels, d.channels_real);

    const uint32_t ws2 = regs[CNA_WEIGHT_SIZE2];
    d.kw = fld::WEIGHT_SIZE2_WEIGHT_WIDTH.get(ws2);
    d.kh = fld::WEIGHT_SIZE2_WEIGHT_HEIGHT.get(ws2);
    d.kernels = fld::WEIGHT_SIZE2_WEIGHT_KERNELS.get(ws2);
    if (d.kw == 0 || d.kh == 0 || d.kernels == 0) error("CNA_WEIGHT_SIZE2 0x{:08x}: empty kernel", ws2);
    const uint32_t per_kernel = fld::WEIGHT_SIZE1_BYTES_PER_KERNEL.get(regs[CNA_WEIGHT_SIZE1]);
    if (per_kernel != d.kw * d.kh * d.channels)
      error("CNA_WEIGHT_SIZE1: {} bytes per kernel, but the kernel is {}x{}x{} = {}", per_kernel, d.kw, d.kh,
            d.channels, d.kw * d.kh * d.channels);
    if (per_kernel > kMaxReduction)
      error("CNA_WEIGHT_SIZE1: reduction length {} exceeds the per-task limit {} (shape limit)", per_kernel,
            kMaxReduction);
    d.weight_bytes = regs[CNA_WEIGHT_SIZE0];
    if (uint64_t(d.weight_bytes) != uint64_t(per_kernel) * d.kernels)
      error("CNA_WEIGHT_SIZE0: {} bytes, but {} kernels x {} bytes = {}", d.weight_bytes, d.kernels, per_kernel,
            uint64_t(per_kernel) * d.kernels);

    const uint32_t cbuf = regs[CNA_CBUF_CON0];
    d.data_banks = fld::CBUF_CON0_DATA_BANK.get(cbuf);
    d.weight_banks = fld::CBUF_CON0_WEIGHT_BANK.get(cbuf);
    d.weight_reuse = fld::CBUF_CON0_WEIGHT_REUSE.get(cbuf);
    if (d.data_banks + d.weight_banks > kCbufBanks)
      error("CNA_CBUF_CON0: DATA_BANK {} + WEIGHT_BANK {} = {} exceeds the {} CBUF banks", d.data_banks, d.weight_banks,
            d.data_banks + d.weight_banks, kCbufBanks);
    if (d.data_banks == 0 || d.weight_banks == 0)
      error("CNA_CBUF_CON0: DATA_BANK {} / WEIGHT_BANK {}: both need at least one bank", d.data_banks, d.weight_banks);
    const uint64_t entries = uint64_t(cbuf_entries_per_row(d.in_w, d.channels_real)) * d.in_h;
    if (entries > uint64_t(d.data_banks) * kCbufEntriesPerBank)
      error(
          "CNA_CBUF_CON0: DATA_BANK {} holds {} entries but the input ({} rows x {} entries, CNA_DATA_SIZE0) "
          "needs {} (CBUF bank overflow)",
          d.data_banks, d.data_banks * kCbufEntriesPerBank, d.in_h, cbuf_entries_per_row(d.in_w, d.channels_real),
          entries);
    if (opt_.require_resident_weights && d.weight_bytes > d.weight_banks * kCbufBankBytes)
      error(
          "CNA_WEIGHT_SIZE0: {} bytes of weights exceed CNA_CBUF_CON0.WEIGHT_BANK {} x 32 KiB (CBUF bank "
          "overflow; resident weights required)",
          d.weight_bytes, d.weight_banks);
    if (d.weight_reuse) {
      if (!prev) error("CNA_CBUF_CON0.WEIGHT_REUSE is set on the first task of a job: the CBUF holds no weights yet");
      if (prev->weight_bytes != d.weight_bytes || prev->kernels != d.kernels || prev->weight_banks != d.weight_banks ||
          prev_weight_addr_ != regs[CNA_DCOMP_ADDR0])
        error(
            "CNA_CBUF_CON0.WEIGHT_REUSE is set but the weights (CNA_DCOMP_ADDR0 / CNA_WEIGHT_SIZE0 / "
            "WEIGHT_BANK) differ from the previous task's");
    }

    const uint32_t pad0 = regs[CNA_PAD_CON0];
    d.pad_top = fld::PAD_CON0_PAD_TOP.get(pad0);
    d.pad_left = fld::PAD_CON0_PAD_LEFT.get(pad0);
    d.pad_value = int8_t(uint8_t(regs[CNA_PAD_CON1] & 0xff));

    d.out_w = fld::DATAOUT_SIZE_0_WIDTH.get(regs[CORE_DATAOUT_SIZE_0]) + 1;
    d.out_h = fld::DATAOUT_SIZE_0_HEIGHT.get(regs[CORE_DATAOUT_SIZE_0]) + 1;
    d.out_channels = fld::DATAOUT_SIZE_1_CHANNEL.get(regs[CORE_DATAOUT_SIZE_1]) + 1;
    const uint32_t cube = regs[DPU_DATA_CUBE_CHANNEL];
    if (fld::DATA_CUBE_CHANNEL_CHANNEL.get(cube) + 1 != d.out_channels)
      error("DPU_DATA_CUBE_CHANNEL.CHANNEL {} disagrees with CORE_DATAOUT_SIZE_1 {}",
            fld::DATA_CUBE_CHANNEL_CHANNEL.get(cube) + 1, d.out_channels);
    d.orig_channels = fld::DATA_CUBE_CHANNEL_ORIG_CHANNEL.get(cube) + 1;
    if (d.orig_channels > d.out_channels || d.kernels > d.out_channels)
      error("DPU_DATA_CUBE_CHANNEL: {} real channels / {} kernels exceed the {} output channels", d.orig_channels,
            d.kernels, d.out_channels);
    if (fld::DATA_CUBE_WIDTH_WIDTH.get(regs[DPU_DATA_CUBE_WIDTH]) + 1 != d.out_w ||
        fld::DATA_CUBE_HEIGHT_HEIGHT.get(regs[DPU_DATA_CUBE_HEIGHT]) + 1 != d.out_h)
      error("DPU_DATA_CUBE_WIDTH/HEIGHT disagree with CORE_DATAOUT_SIZE_0 ({}x{})", d.out_w, d.out_h);
    if (fld::DATA_SIZE2_DATAOUT_WIDTH.get(regs[CNA_DATA_SIZE2]) != d.out_w ||
        fld::DATA_SIZE3_DATAOUT_ATOMICS.get(regs[CNA_DATA_SIZE3]) != d.out_w * d.out_h)
      error("CNA_DATA_SIZE2/3 (width {}, atomics {}) disagree with the {}x{} output",
            fld::DATA_SIZE2_DATAOUT_WIDTH.get(regs[CNA_DATA_SIZE2]),
            fld::DATA_SIZE3_DATAOUT_ATOMICS.get(regs[CNA_DATA_SIZE3]), d.out_w, d.out_h);
    // Bottom/right padding is implicit: more than kernel-1 rows of it means
    // the output reads rows that do not exist.
    const int64_t bottom = int64_t(d.out_h - 1) * d.stride_y + d.kh - (int64_t(d.pad_top) + d.in_h);
    const int64_t right = int64_t(d.out_w - 1) * d.stride_x + d.kw - (int64_t(d.pad_left) + d.in_w);
    if (bottom > int64_t(d.kh) - 1 || right > int64_t(d.kw) - 1)
      error(
          "CORE_DATAOUT_SIZE_0: a {}x{} output needs {} rows / {} columns of implicit padding past the {}x{} "
          "input (shape limit)",
          d.out_w, d.out_h, bottom, right, d.in_w, d.in_h);

    d.input_addr = regs[CNA_FEATURE_DATA_ADDR];
    d.weight_addr = regs[CNA_DCOMP_ADDR0];
    d.dst_addr = regs[DPU_DST_BASE_ADDR];
    d.bias_addr = regs[RDMA_BS_BASE_ADDR];
    for (auto [r, v] : {std::pair{CNA_FEATURE_DATA_ADDR, d.input_addr}, std::pair{CNA_DCOMP_ADDR0, d.weight_addr},
                        std::pair{DPU_DST_BASE_ADDR, d.dst_addr}, std::pair{RDMA_BS_BASE_ADDR, d.bias_addr}})
      if (v % 16 != 0) error("{} 0x{:08x} is not 16-byte aligned", register_name(r), v);

    const uint32_t line = fld::DMA_CON1_LINE_STRIDE.get(regs[CNA_DMA_CON1]);
    const uint32_t surf = fld::DMA_CON2_SURF_STRIDE.get(regs[CNA_DMA_CON2]);
    d.line_pitch = uint64_t(line) * 4;
    if (d.line_pitch < uint64_t(d.in_w) * kFeatureAtomBytes)
      error("CNA_DMA_CON1: line stride {} ({} bytes) is shorter than a {}-pixel row", line, d.line_pitch, d.in_w);
    if (surf & (1u << 27)) {
      const std::string msg = fmt::format(
          "job {} task {}: CNA_DMA_CON2 surface stride 0x{:07x} is negative as a 28-bit value (height {} < 4?); "
          "emulated with 28-bit wrap-around, hardware behaviour unknown",
          job_, task_, surf, d.in_h);
      if (opt_.reject_wrapped_surface_stride) error("{}", msg);
      warnings_.push_back(msg);
    }
    d.surface_pitch = uint64_t((surf + line) & 0x0fffffffu) * 16;
    const unsigned groups = d.channels / kFeatureAtomBytes;
    if (groups > 1 && d.surface_pitch < uint64_t(d.in_h - 1) * d.line_pitch + uint64_t(d.in_w) * kFeatureAtomBytes)
      error("CNA_DMA_CON2: surface pitch {} bytes overlaps the {} rows of the previous channel surface",
            d.surface_pitch, d.in_h);

    if (fld::MISC_CFG_DW_EN.get(regs[CORE_MISC_CFG]) || fld::MISC_CFG_PROC_PRECISION.get(regs[CORE_MISC_CFG]))
      error("CORE_MISC_CFG 0x{:08x}: only int8 non-depthwise convolution is emulated", regs[CORE_MISC_CFG]);
    d.truncate = fld::CLIP_TRUNCATE_CLIP_TRUNCATE.get(regs[CORE_CLIP_TRUNCATE]);

    const uint32_t fmtv = regs[DPU_DATA_FORMAT];
    const uint32_t out_prec = fld::DATA_FORMAT_OUT_PRECISION.get(fmtv);
    if (out_prec != uint32_t(Precision::Int8) && out_prec != uint32_t(Precision::Int32))
      error("DPU_DATA_FORMAT 0x{:08x}: output precision {} is not emulated (int8 or int32)", fmtv, out_prec);
    if (fld::DATA_FORMAT_IN_PRECISION.get(fmtv) || fld::DATA_FORMAT_PROC_PRECISION.get(fmtv))
      error("DPU_DATA_FORMAT 0x{:08x}: only int8 input/processing precision is emulated", fmtv);
    d.int32_out = out_prec == uint32_t(Precision::Int32);
    d.out_surface_pitch = uint64_t(fld::DST_SURF_STRIDE_STRIDE.get(regs[DPU_DST_SURF_STRIDE])) * 16;
    if (d.out_surface_pitch < uint64_t(d.out_w) * d.out_h * 16)
      error("DPU_DST_SURF_STRIDE: {} atoms per surface, fewer than the {}x{} output", d.out_surface_pitch / 16, d.out_w,
            d.out_h);

    const uint32_t bs = regs[DPU_BS_CFG];
    const bool bs_bypass = fld::BS_CFG_BYPASS.get(bs) || fld::BS_CFG_ALU_BYPASS.get(bs);
    if (!fld::BS_CFG_BYPASS.get(bs) &&
        (!fld::BS_CFG_MUL_BYPASS.get(bs) || !fld::BS_CFG_RELU_BYPASS.get(bs) || fld::BS_CFG_RELUX_EN.get(bs)))
      error("DPU_BS_CFG 0x{:08x}: only the BS ALU (bias add) is emulated; MUL and ReLU must be bypassed", bs);
    d.bias_enabled = !bs_bypass;
    if (d.bias_enabled) {
      if (fld::BS_CFG_ALU_ALGO.get(bs) != 2 || fld::BS_CFG_ALU_SRC.get(bs) != 1)
        error("DPU_BS_CFG 0x{:08x}: only ALU algo 2 (add) from RDMA is emulated", bs);
      if (fld::BRDMA_CFG_DATA_USE.get(regs[RDMA_BRDMA_CFG]) != 1)
        error("DPU_RDMA_RDMA_BRDMA_CFG 0x{:08x}: bias add from RDMA needs BRDMA_DATA_USE 1", regs[RDMA_BRDMA_CFG]);
    }
    if (fld::BS_OW_OP_OW_OP.get(regs[DPU_BS_OW_OP]) != 0)
      error("DPU_BS_OW_OP 0x{:04x}: weight zero-point correction (asymmetric weights) is not emulated",
            regs[DPU_BS_OW_OP]);
    if (!fld::BN_CFG_BYPASS.get(regs[DPU_BN_CFG])) error("DPU_BN_CFG: only a bypassed BN stage is emulated");
    if (!fld::EW_CFG_BYPASS.get(regs[DPU_EW_CFG])) error("DPU_EW_CFG: only a bypassed EW stage is emulated");
    const uint32_t scale = regs[DPU_OUT_CVT_SCALE], shift = regs[DPU_OUT_CVT_SHIFT];
    if (fld::OUT_CVT_SCALE_FP32TOFP16_EN.get(scale) || fld::OUT_CVT_SHIFT_CVT_TYPE.get(shift) ||
        fld::OUT_CVT_SHIFT_CVT_ROUND.get(shift) || fld::OUT_CVT_SHIFT_MINUS_EXP.get(shift))
      error(
          "DPU_OUT_CVT_SCALE/SHIFT 0x{:08x}/0x{:08x}: fp16 conversion, CVT_TYPE, CVT_ROUND and MINUS_EXP are "
          "not emulated",
          scale, shift);
    d.cvt_scale = fld::OUT_CVT_SCALE_SCALE.get(scale);
    d.cvt_shift = fld::OUT_CVT_SHIFT_SHIFT.get(shift);
    d.cvt_offset = int32_t(regs[DPU_OUT_CVT_OFFSET]);
    if (d.cvt_shift > 62) error("DPU_OUT_CVT_SHIFT {} is beyond the emulated range", d.cvt_shift);
    return d;
  }

  void execute(const Decoded& d) {
    const unsigned C = d.channels, taps = d.kw * d.kh;
    const unsigned groups = C / kFeatureAtomBytes;
    // Input window.
    const uint64_t in_span = uint64_t(groups - 1) * d.surface_pitch + uint64_t(d.in_h - 1) * d.line_pitch +
                             uint64_t(d.in_w) * kFeatureAtomBytes;
    const uint8_t* in = mem_.resolve(d.input_addr, in_span);
    if (!in)
      error("CNA_FEATURE_DATA_ADDR 0x{:08x} + {} bytes lies outside every buffer (IOMMU fault)", d.input_addr, in_span);
    std::vector<int8_t> x(size_t(d.in_h) * d.in_w * C);
    for (unsigned r = 0; r < d.in_h; r++)
      for (unsigned c = 0; c < d.in_w; c++)
        for (unsigned g = 0; g < groups; g++) {
          const uint8_t* src = in + g * d.surface_pitch + r * d.line_pitch + c * kFeatureAtomBytes;
          int8_t* dst = &x[(size_t(r) * d.in_w + c) * C + g * kFeatureAtomBytes];
          for (unsigned k = 0; k < kFeatureAtomBytes; k++) dst[k] = int8_t(src[k]);
        }
    // Weights: [kernel group of 32][channel group of 32][tap][kernel][channel].
    const uint8_t* wsrc = mem_.resolve(d.weight_addr, d.weight_bytes);
    if (!wsrc)
      error("CNA_DCOMP_ADDR0 0x{:08x} + {} bytes (CNA_WEIGHT_SIZE0) lies outside every buffer (IOMMU fault)",
            d.weight_addr, d.weight_bytes);
    std::vector<int8_t> w(size_t(d.kernels) * taps * C);
    std::vector<int64_t> w_tap_sum(size_t(d.kernels) * taps, 0);
    for (unsigned n = 0; n < d.kernels; n++) {
      const unsigned g = n / kWeightAtomKernels;
      const unsigned kng = std::min(kWeightAtomKernels, d.kernels - g * kWeightAtomKernels);
      for (unsigned t = 0; t < taps; t++)
        for (unsigned ch = 0; ch < C; ch++) {
          const unsigned cg = ch / 32, cw = std::min(32u, C - cg * 32);
          const size_t off = size_t(g) * kWeightAtomKernels * taps * C + size_t(cg) * taps * kng * 32 +
                             size_t(t) * kng * cw + size_t(n % kWeightAtomKernels) * cw + ch % 32;
          const int8_t v = int8_t(wsrc[off]);
          w[(size_t(n) * taps + t) * C + ch] = v;
          w_tap_sum[size_t(n) * taps + t] += v;
        }
    }
    // Biases.
    std::vector<int32_t> bias(d.out_channels, 0);
    if (d.bias_enabled) {
      const uint8_t* b = mem_.resolve(d.bias_addr, uint64_t(d.orig_channels) * 4);
      if (!b)
        error("DPU_RDMA_RDMA_BS_BASE_ADDR 0x{:08x} + {} bytes lies outside every buffer (IOMMU fault)", d.bias_addr,
              d.orig_channels * 4);
      for (unsigned n = 0; n < d.orig_channels; n++)
        bias[n] = int32_t(uint32_t(b[4 * n]) | uint32_t(b[4 * n + 1]) << 8 | uint32_t(b[4 * n + 2]) << 16 |
                          uint32_t(b[4 * n + 3]) << 24);
    }
    // Output.
    const unsigned per_atom = d.int32_out ? 4 : 16;
    const unsigned out_groups = (d.out_channels + per_atom - 1) / per_atom;
    const uint64_t out_span = uint64_t(out_groups - 1) * d.out_surface_pitch + uint64_t(d.out_w) * d.out_h * 16;
    uint8_t* out = mem_.resolve(d.dst_addr, out_span);
    if (!out)
      error("DPU_DST_BASE_ADDR 0x{:08x} + {} bytes lies outside every buffer (IOMMU fault)", d.dst_addr, out_span);

    std::vector<int64_t> acc(d.kernels);
    for (unsigned oy = 0; oy < d.out_h; oy++)
      for (unsigned ox = 0; ox < d.out_w; ox++) {
        std::fill(acc.begin(), acc.end(), 0);
        for (unsigned ky = 0; ky < d.kh; ky++)
          for (unsigned kx = 0; kx < d.kw; kx++) {
            const int64_t iy = int64_t(oy) * d.stride_y + ky - d.pad_top;
            const int64_t ix = int64_t(ox) * d.stride_x + kx - d.pad_left;
            const unsigned t = ky * d.kw + kx;
            if (iy < 0 || ix < 0 || iy >= d.in_h || ix >= d.in_w) {
              for (unsigned n = 0; n < d.kernels; n++) acc[n] += int64_t(d.pad_value) * w_tap_sum[size_t(n) * taps + t];
              continue;
            }
            const int8_t* xv = &x[(size_t(iy) * d.in_w + ix) * C];
            for (unsigned n = 0; n < d.kernels; n++) {
              const int8_t* wv = &w[(size_t(n) * taps + t) * C];
              int32_t s = 0;
              for (unsigned ch = 0; ch < C; ch++) s += int32_t(xv[ch]) * int32_t(wv[ch]);
              acc[n] += s;
            }
          }
        const uint64_t atom = (uint64_t(oy) * d.out_w + ox) * 16;
        for (unsigned n = 0; n < d.out_channels; n++) {
          const int64_t a = n < d.kernels ? acc[n] : 0;
          const int32_t truncated = sat32(round_shift(a, d.truncate, Rounding::HalfAwayFromZero));
          const int32_t with_bias = sat32(int64_t(truncated) + bias[n]);
          uint8_t* dst = out + (n / per_atom) * d.out_surface_pitch + atom;
          if (d.int32_out) {
            const uint32_t v = uint32_t(with_bias);
            for (int b = 0; b < 4; b++) dst[(n % 4) * 4 + b] = uint8_t(v >> (8 * b));
          } else {
            dst[n % 16] =
                uint8_t(out_cvt_int8(with_bias, d.cvt_scale, d.cvt_shift, d.cvt_offset, opt_.out_cvt_rounding));
          }
        }
      }
  }

  uint32_t prev_weight_addr_ = 0;

 private:
  NpuMemory& mem_;
  const EmulatorOptions& opt_;
  std::vector<std::string>& warnings_;
  unsigned job_, task_;
};

}  // namespace

const char* rounding_name(Rounding r) {
  switch (r) {
    case Rounding::HalfAwayFromZero: return "half-away";
    case Rounding::HalfUp: return "half-up";
    case Rounding::HalfEven: return "half-even";
    case Rounding::Truncate: return "truncate";
  }
  return "?";
}

Rounding parse_rounding(const std::string& s) {
  for (Rounding r : {Rounding::HalfAwayFromZero, Rounding::HalfUp, Rounding::HalfEven, Rounding::Truncate})
    if (s == rounding_name(r)) return r;
  fail("rocket: unknown rounding '{}' (half-away, half-up, half-even, truncate)", s);
}

int64_t round_shift(int64_t v, unsigned shift, Rounding r) {
  if (shift == 0) return v;
  const int64_t div = int64_t(1) << shift;
  const int64_t floor_q = v >= 0 ? v / div : -((-v + div - 1) / div);
  const int64_t rem = v - floor_q * div;  // 0 <= rem < div
  const int64_t half = div / 2;
  switch (r) {
    case Rounding::Truncate: return v >= 0 ? floor_q : (rem ? floor_q + 1 : floor_q);  // toward zero
    case Rounding::HalfUp: return rem >= half ? floor_q + 1 : floor_q;
    case Rounding::HalfEven:
      if (rem > half) return floor_q + 1;
      if (rem < half) return floor_q;
      return (floor_q & 1) ? floor_q + 1 : floor_q;
    case Rounding::HalfAwayFromZero:
      if (rem > half) return floor_q + 1;
      if (rem < half) return floor_q;
      return v >= 0 ? floor_q + 1 : floor_q;
  }
  return floor_q;
}

int8_t out_cvt_int8(int64_t value, uint32_t scale, uint32_t shift, int32_t offset, Rounding r) {
  const int64_t y = round_shift(value * int64_t(scale), shift, r) + offset;
  return int8_t(std::clamp<int64_t>(y, -128, 127));
}

void NpuEmulator::run_job(const abi::JobDesc& job) {
  const unsigned job_index = jobs_run_++;
  if (job.tasks.empty()) fail("rocket emulator: job {} has no tasks (the kernel rejects it)", job_index);
  if (tasks_.size() + job.tasks.size() > kMaxTaskSummaries)
    tasks_.erase(tasks_.begin(), tasks_.begin() + std::ptrdiff_t(tasks_.size() / 2));
  RegisterFile regs;
  const TaskSummary* prev = nullptr;
  uint32_t prev_weight_addr = 0;
  for (unsigned i = 0; i < job.tasks.size(); i++) {
    TaskRunner runner(memory_, options_, warnings_, job_index, i);
    runner.prev_weight_addr_ = prev_weight_addr;
    runner.load(job.tasks[i], regs);
    const Decoded d = runner.decode(regs, prev);
    runner.execute(d);
    TaskSummary s;
    s.job = job_index;
    s.task = i;
    s.in_width = d.in_w;
    s.in_height = d.in_h;
    s.channels = d.channels;
    s.kernels = d.kernels;
    s.out_channels = d.out_channels;
    s.out_width = d.out_w;
    s.out_height = d.out_h;
    s.kernel_width = d.kw;
    s.kernel_height = d.kh;
    s.stride = d.stride_y;
    s.data_banks = d.data_banks;
    s.weight_banks = d.weight_banks;
    s.weight_reuse = d.weight_reuse;
    s.weight_bytes = d.weight_bytes;
    s.int32_output = d.int32_out;
    tasks_.push_back(s);
    prev = &tasks_.back();
    prev_weight_addr = d.weight_addr;
  }
}

}  // namespace opal::rocket
