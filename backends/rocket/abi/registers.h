// RK3588 NPU register map: the one definition of register offsets, blocks and
// bit fields shared by the regcmd builder (lower/) and the emulator
// (driver/emulator/). Offsets and field positions are facts from Mesa's
// registers.xml (rules-ng database, MIT); only the registers a GEMM/convolution
// task programs are listed, plus the two undocumented ones the blob writes.
//
// A regcmd entry targets a block: PC 0x100, CNA 0x200, CORE 0x800, DPU 0x1000,
// DPU_RDMA 0x2000; the entry's target field is block | 1 (see regcmd.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace opal::rocket::abi {

enum class Block : uint32_t { PC = 0x100, CNA = 0x200, CORE = 0x800, DPU = 0x1000, DPU_RDMA = 0x2000 };

const char* block_name(Block b);

// A bit field [low, high] inside a 32-bit register.
struct Field {
  uint8_t low;
  uint8_t high;
  constexpr uint32_t mask() const { return high - low == 31 ? 0xffffffffu : (((1u << (high - low + 1)) - 1u) << low); }
  // Packs v into the field, truncating to its width (as Mesa's generated packers do).
  constexpr uint32_t operator()(uint32_t v) const { return (v << low) & mask(); }
  constexpr uint32_t get(uint32_t reg) const { return (reg & mask()) >> low; }
  constexpr uint32_t max_value() const { return mask() >> low; }
};

// Register offsets (MMIO offsets within one core, as used in regcmd entries).
namespace reg {
// PC
inline constexpr uint16_t PC_OPERATION_ENABLE = 0x0008;
inline constexpr uint16_t PC_BASE_ADDRESS = 0x0010;
inline constexpr uint16_t PC_REGISTER_AMOUNTS = 0x0014;
// CNA
inline constexpr uint16_t CNA_CONV_CON1 = 0x100c;
inline constexpr uint16_t CNA_CONV_CON2 = 0x1010;
inline constexpr uint16_t CNA_CONV_CON3 = 0x1014;
inline constexpr uint16_t CNA_DATA_SIZE0 = 0x1020;
inline constexpr uint16_t CNA_DATA_SIZE1 = 0x1024;
inline constexpr uint16_t CNA_DATA_SIZE2 = 0x1028;
inline constexpr uint16_t CNA_DATA_SIZE3 = 0x102c;
inline constexpr uint16_t CNA_WEIGHT_SIZE0 = 0x1030;
inline constexpr uint16_t CNA_WEIGHT_SIZE1 = 0x1034;
inline constexpr uint16_t CNA_WEIGHT_SIZE2 = 0x1038;
inline constexpr uint16_t CNA_CBUF_CON0 = 0x1040;
inline constexpr uint16_t CNA_CBUF_CON1 = 0x1044;
inline constexpr uint16_t CNA_CVT_CON0 = 0x104c;
inline constexpr uint16_t CNA_CVT_CON1 = 0x1050;
inline constexpr uint16_t CNA_CVT_CON2 = 0x1054;
inline constexpr uint16_t CNA_CVT_CON3 = 0x1058;
inline constexpr uint16_t CNA_CVT_CON4 = 0x105c;
inline constexpr uint16_t CNA_FC_CON0 = 0x1060;
inline constexpr uint16_t CNA_FC_CON1 = 0x1064;
inline constexpr uint16_t CNA_PAD_CON0 = 0x1068;
inline constexpr uint16_t CNA_FEATURE_DATA_ADDR = 0x1070;
inline constexpr uint16_t CNA_FC_CON2 = 0x1074;
inline constexpr uint16_t CNA_DMA_CON0 = 0x1078;
inline constexpr uint16_t CNA_DMA_CON1 = 0x107c;
inline constexpr uint16_t CNA_DMA_CON2 = 0x1080;
inline constexpr uint16_t CNA_FC_DATA_SIZE0 = 0x1084;
inline constexpr uint16_t CNA_FC_DATA_SIZE1 = 0x1088;
inline constexpr uint16_t CNA_DCOMP_CTRL = 0x1100;
inline constexpr uint16_t CNA_DCOMP_REGNUM = 0x1104;
inline constexpr uint16_t CNA_DCOMP_ADDR0 = 0x1110;
inline constexpr uint16_t CNA_DCOMP_AMOUNT0 = 0x1140;  // AMOUNT0..15 at +4 each
inline constexpr uint16_t CNA_CVT_CON5 = 0x1180;
inline constexpr uint16_t CNA_PAD_CON1 = 0x1184;
// CORE
inline constexpr uint16_t CORE_MISC_CFG = 0x3010;
inline constexpr uint16_t CORE_DATAOUT_SIZE_0 = 0x3014;
inline constexpr uint16_t CORE_DATAOUT_SIZE_1 = 0x3018;
inline constexpr uint16_t CORE_CLIP_TRUNCATE = 0x301c;
inline constexpr uint16_t CORE_UNDOCUMENTED_3030 = 0x3030;  // blob writes 0 here
// DPU
inline constexpr uint16_t DPU_S_POINTER = 0x4004;
inline constexpr uint16_t DPU_FEATURE_MODE_CFG = 0x400c;
inline constexpr uint16_t DPU_DATA_FORMAT = 0x4010;
inline constexpr uint16_t DPU_OFFSET_PEND = 0x4014;
inline constexpr uint16_t DPU_DST_BASE_ADDR = 0x4020;
inline constexpr uint16_t DPU_DST_SURF_STRIDE = 0x4024;
inline constexpr uint16_t DPU_DATA_CUBE_WIDTH = 0x4030;
inline constexpr uint16_t DPU_DATA_CUBE_HEIGHT = 0x4034;
inline constexpr uint16_t DPU_DATA_CUBE_NOTCH_ADDR = 0x4038;
inline constexpr uint16_t DPU_DATA_CUBE_CHANNEL = 0x403c;
inline constexpr uint16_t DPU_BS_CFG = 0x4040;
inline constexpr uint16_t DPU_BS_ALU_CFG = 0x4044;
inline constexpr uint16_t DPU_BS_MUL_CFG = 0x4048;
inline constexpr uint16_t DPU_BS_RELUX_CMP_VALUE = 0x404c;
inline constexpr uint16_t DPU_BS_OW_CFG = 0x4050;
inline constexpr uint16_t DPU_BS_OW_OP = 0x4054;
inline constexpr uint16_t DPU_WDMA_SIZE_0 = 0x4058;
inline constexpr uint16_t DPU_WDMA_SIZE_1 = 0x405c;
inline constexpr uint16_t DPU_BN_CFG = 0x4060;
inline constexpr uint16_t DPU_BN_ALU_CFG = 0x4064;
inline constexpr uint16_t DPU_BN_MUL_CFG = 0x4068;
inline constexpr uint16_t DPU_BN_RELUX_CMP_VALUE = 0x406c;
inline constexpr uint16_t DPU_EW_CFG = 0x4070;
inline constexpr uint16_t DPU_EW_CVT_OFFSET_VALUE = 0x4074;
inline constexpr uint16_t DPU_EW_CVT_SCALE_VALUE = 0x4078;
inline constexpr uint16_t DPU_EW_RELUX_CMP_VALUE = 0x407c;
inline constexpr uint16_t DPU_OUT_CVT_OFFSET = 0x4080;
inline constexpr uint16_t DPU_OUT_CVT_SCALE = 0x4084;
inline constexpr uint16_t DPU_OUT_CVT_SHIFT = 0x4088;
inline constexpr uint16_t DPU_EW_OP_VALUE_0 = 0x4090;  // 0..7 at +4 each
inline constexpr uint16_t DPU_SURFACE_ADD = 0x40c0;
inline constexpr uint16_t DPU_UNDOCUMENTED_40C4 = 0x40c4;  // blob writes 0 here
inline constexpr uint16_t DPU_LUT_ACCESS_CFG = 0x4100;
inline constexpr uint16_t DPU_LUT_ACCESS_DATA = 0x4104;
inline constexpr uint16_t DPU_LUT_CFG = 0x4108;
inline constexpr uint16_t DPU_LUT_INFO = 0x410c;
inline constexpr uint16_t DPU_LUT_LE_START = 0x4110;
inline constexpr uint16_t DPU_LUT_LE_END = 0x4114;
inline constexpr uint16_t DPU_LUT_LO_START = 0x4118;
inline constexpr uint16_t DPU_LUT_LO_END = 0x411c;
inline constexpr uint16_t DPU_LUT_LE_SLOPE_SCALE = 0x4120;
inline constexpr uint16_t DPU_LUT_LE_SLOPE_SHIFT = 0x4124;
inline constexpr uint16_t DPU_LUT_LO_SLOPE_SCALE = 0x4128;
inline constexpr uint16_t DPU_LUT_LO_SLOPE_SHIFT = 0x412c;
// DPU_RDMA
inline constexpr uint16_t RDMA_S_POINTER = 0x5004;
inline constexpr uint16_t RDMA_DATA_CUBE_WIDTH = 0x500c;
inline constexpr uint16_t RDMA_DATA_CUBE_HEIGHT = 0x5010;
inline constexpr uint16_t RDMA_DATA_CUBE_CHANNEL = 0x5014;
inline constexpr uint16_t RDMA_SRC_BASE_ADDR = 0x5018;
inline constexpr uint16_t RDMA_BRDMA_CFG = 0x501c;
inline constexpr uint16_t RDMA_BS_BASE_ADDR = 0x5020;
inline constexpr uint16_t RDMA_NRDMA_CFG = 0x5028;
inline constexpr uint16_t RDMA_BN_BASE_ADDR = 0x502c;
inline constexpr uint16_t RDMA_ERDMA_CFG = 0x5034;
inline constexpr uint16_t RDMA_EW_BASE_ADDR = 0x5038;
inline constexpr uint16_t RDMA_EW_SURF_STRIDE = 0x5040;
inline constexpr uint16_t RDMA_FEATURE_MODE_CFG = 0x5044;
inline constexpr uint16_t RDMA_SRC_DMA_CFG = 0x5048;
inline constexpr uint16_t RDMA_SURF_NOTCH = 0x504c;
inline constexpr uint16_t RDMA_PAD_CFG = 0x5064;
inline constexpr uint16_t RDMA_WEIGHT = 0x5068;
inline constexpr uint16_t RDMA_EW_SURF_NOTCH = 0x506c;
}  // namespace reg

// Bit fields, named REGISTER_FIELD.
namespace fld {
// PC
inline constexpr Field PC_OPERATION_ENABLE_OP_EN{0, 0};
inline constexpr Field PC_OPERATION_ENABLE_RESERVED_0{1, 31};  // per-block enables (mask 0x1d in Mesa)
inline constexpr Field PC_BASE_ADDRESS_SOURCE_ADDR{4, 31};
inline constexpr Field PC_REGISTER_AMOUNTS_DATA_AMOUNT{0, 15};
// CNA
inline constexpr Field CONV_CON1_NONALIGN_DMA{30, 30};
inline constexpr Field CONV_CON1_GROUP_LINE_OFF{29, 29};
inline constexpr Field CONV_CON1_DECONV{16, 16};
inline constexpr Field CONV_CON1_ARGB_IN{12, 15};
inline constexpr Field CONV_CON1_PROC_PRECISION{7, 9};
inline constexpr Field CONV_CON1_IN_PRECISION{4, 6};
inline constexpr Field CONV_CON1_CONV_MODE{0, 3};
inline constexpr Field CONV_CON2_KERNEL_GROUP{16, 23};
inline constexpr Field CONV_CON2_FEATURE_GRAINS{4, 13};
inline constexpr Field CONV_CON3_ATROUS_Y_DILATION{21, 25};
inline constexpr Field CONV_CON3_ATROUS_X_DILATION{16, 20};
inline constexpr Field CONV_CON3_DECONV_Y_STRIDE{11, 13};
inline constexpr Field CONV_CON3_DECONV_X_STRIDE{8, 10};
inline constexpr Field CONV_CON3_CONV_Y_STRIDE{3, 5};
inline constexpr Field CONV_CON3_CONV_X_STRIDE{0, 2};
inline constexpr Field DATA_SIZE0_DATAIN_WIDTH{16, 26};
inline constexpr Field DATA_SIZE0_DATAIN_HEIGHT{0, 10};
inline constexpr Field DATA_SIZE1_DATAIN_CHANNEL_REAL{16, 29};
inline constexpr Field DATA_SIZE1_DATAIN_CHANNEL{0, 15};
inline constexpr Field DATA_SIZE2_DATAOUT_WIDTH{0, 10};
inline constexpr Field DATA_SIZE3_DATAOUT_ATOMICS{0, 21};
inline constexpr Field WEIGHT_SIZE0_WEIGHT_BYTES{0, 31};
inline constexpr Field WEIGHT_SIZE1_BYTES_PER_KERNEL{0, 18};
inline constexpr Field WEIGHT_SIZE2_WEIGHT_WIDTH{24, 28};
inline constexpr Field WEIGHT_SIZE2_WEIGHT_HEIGHT{16, 20};
inline constexpr Field WEIGHT_SIZE2_WEIGHT_KERNELS{0, 13};
inline constexpr Field CBUF_CON0_WEIGHT_REUSE{13, 13};
inline constexpr Field CBUF_CON0_DATA_REUSE{12, 12};
inline constexpr Field CBUF_CON0_FC_DATA_BANK{8, 10};
inline constexpr Field CBUF_CON0_WEIGHT_BANK{4, 7};
inline constexpr Field CBUF_CON0_DATA_BANK{0, 3};
inline constexpr Field CBUF_CON1_DATA_ENTRIES{0, 13};
inline constexpr Field CVT_CON0_DATA_SIGN{3, 3};
inline constexpr Field CVT_CON0_ROUND_TYPE{2, 2};
inline constexpr Field CVT_CON0_CVT_TYPE{1, 1};
inline constexpr Field CVT_CON0_CVT_BYPASS{0, 0};
inline constexpr Field CVT_CONx_SCALE{16, 31};
inline constexpr Field CVT_CONx_OFFSET{0, 15};
inline constexpr Field PAD_CON0_PAD_LEFT{4, 7};
inline constexpr Field PAD_CON0_PAD_TOP{0, 3};
inline constexpr Field DMA_CON0_WEIGHT_BURST_LEN{16, 19};
inline constexpr Field DMA_CON0_DATA_BURST_LEN{0, 3};
inline constexpr Field DMA_CON1_LINE_STRIDE{0, 27};
inline constexpr Field DMA_CON2_SURF_STRIDE{0, 27};
inline constexpr Field FC_DATA_SIZE0_DMA_WIDTH{16, 29};
inline constexpr Field FC_DATA_SIZE0_DMA_HEIGHT{0, 10};
inline constexpr Field FC_DATA_SIZE1_DMA_CHANNEL{0, 15};
// CORE
inline constexpr Field MISC_CFG_PROC_PRECISION{8, 10};
inline constexpr Field MISC_CFG_DW_EN{1, 1};
inline constexpr Field MISC_CFG_QD_EN{0, 0};
inline constexpr Field DATAOUT_SIZE_0_HEIGHT{16, 31};
inline constexpr Field DATAOUT_SIZE_0_WIDTH{0, 15};
inline constexpr Field DATAOUT_SIZE_1_CHANNEL{0, 15};
inline constexpr Field CLIP_TRUNCATE_ROUND_TYPE{6, 6};
inline constexpr Field CLIP_TRUNCATE_CLIP_TRUNCATE{0, 4};
// DPU
inline constexpr Field S_POINTER_POINTER_PP_MODE{3, 3};
inline constexpr Field S_POINTER_EXECUTER_PP_EN{2, 2};
inline constexpr Field S_POINTER_POINTER_PP_EN{1, 1};
inline constexpr Field FEATURE_MODE_CFG_BURST_LEN{5, 8};
inline constexpr Field FEATURE_MODE_CFG_CONV_MODE{3, 4};
inline constexpr Field FEATURE_MODE_CFG_OUTPUT_MODE{1, 2};
inline constexpr Field FEATURE_MODE_CFG_FLYING_MODE{0, 0};
inline constexpr Field DATA_FORMAT_OUT_PRECISION{29, 31};
inline constexpr Field DATA_FORMAT_IN_PRECISION{26, 28};
inline constexpr Field DATA_FORMAT_PROC_PRECISION{0, 2};
inline constexpr Field DST_SURF_STRIDE_STRIDE{4, 31};
inline constexpr Field DATA_CUBE_WIDTH_WIDTH{0, 12};
inline constexpr Field DATA_CUBE_HEIGHT_HEIGHT{0, 12};
inline constexpr Field DATA_CUBE_CHANNEL_ORIG_CHANNEL{16, 28};
inline constexpr Field DATA_CUBE_CHANNEL_CHANNEL{0, 12};
inline constexpr Field BS_CFG_ALU_ALGO{16, 19};
inline constexpr Field BS_CFG_ALU_SRC{8, 8};
inline constexpr Field BS_CFG_RELUX_EN{7, 7};
inline constexpr Field BS_CFG_RELU_BYPASS{6, 6};
inline constexpr Field BS_CFG_MUL_PRELU{5, 5};
inline constexpr Field BS_CFG_MUL_BYPASS{4, 4};
inline constexpr Field BS_CFG_ALU_BYPASS{1, 1};
inline constexpr Field BS_CFG_BYPASS{0, 0};
inline constexpr Field BS_OW_CFG_SIZE_E_2{8, 10};
inline constexpr Field BS_OW_CFG_SIZE_E_1{5, 7};
inline constexpr Field BS_OW_CFG_SIZE_E_0{2, 4};
inline constexpr Field BS_OW_OP_OW_OP{0, 15};
inline constexpr Field WDMA_SIZE_0_CHANNEL{0, 12};
inline constexpr Field WDMA_SIZE_1_HEIGHT{16, 28};
inline constexpr Field WDMA_SIZE_1_WIDTH{0, 12};
inline constexpr Field BN_CFG_RELU_BYPASS{6, 6};
inline constexpr Field BN_CFG_MUL_BYPASS{4, 4};
inline constexpr Field BN_CFG_ALU_BYPASS{1, 1};
inline constexpr Field BN_CFG_BYPASS{0, 0};
inline constexpr Field EW_CFG_RELU_BYPASS{9, 9};
inline constexpr Field EW_CFG_OP_CVT_BYPASS{8, 8};
inline constexpr Field EW_CFG_LUT_BYPASS{7, 7};
inline constexpr Field EW_CFG_OP_BYPASS{1, 1};
inline constexpr Field EW_CFG_BYPASS{0, 0};
inline constexpr Field EW_CVT_SCALE_VALUE_SCALE{0, 15};
inline constexpr Field OUT_CVT_SCALE_FP32TOFP16_EN{16, 16};
inline constexpr Field OUT_CVT_SCALE_SCALE{0, 15};
inline constexpr Field OUT_CVT_SHIFT_CVT_TYPE{31, 31};
inline constexpr Field OUT_CVT_SHIFT_CVT_ROUND{30, 30};
inline constexpr Field OUT_CVT_SHIFT_MINUS_EXP{12, 19};
inline constexpr Field OUT_CVT_SHIFT_SHIFT{0, 11};
inline constexpr Field SURFACE_ADD_SURF_ADD{4, 31};
// DPU_RDMA
inline constexpr Field RDMA_DATA_CUBE_WIDTH_WIDTH{0, 12};
inline constexpr Field RDMA_DATA_CUBE_HEIGHT_HEIGHT{0, 12};
inline constexpr Field RDMA_DATA_CUBE_CHANNEL_CHANNEL{0, 12};
inline constexpr Field BRDMA_CFG_DATA_USE{1, 4};
inline constexpr Field ERDMA_CFG_DISABLE{0, 0};
inline constexpr Field RDMA_FEATURE_MODE_CFG_BURST_LEN{11, 14};
inline constexpr Field RDMA_FEATURE_MODE_CFG_MRDMA_DISABLE{4, 4};
inline constexpr Field RDMA_FEATURE_MODE_CFG_CONV_MODE{1, 2};
inline constexpr Field RDMA_WEIGHT_E{24, 31};
inline constexpr Field RDMA_WEIGHT_N{16, 23};
inline constexpr Field RDMA_WEIGHT_B{8, 15};
inline constexpr Field RDMA_WEIGHT_M{0, 7};
}  // namespace fld

// Precision codes of CONV_CON1 / MISC_CFG / DPU_DATA_FORMAT fields.
enum class Precision : uint32_t { Int8 = 0, Int16 = 1, Fp16 = 2, Int32 = 4, Fp32 = 5 };

struct RegisterInfo {
  uint16_t offset;
  Block block;
  const char* name;
  bool undocumented;  // written by the blob/Mesa, meaning unknown
  bool address;       // holds an NPU IOVA (relocated when comparing streams)
};

// The register known at `offset`, or nullptr.
const RegisterInfo* find_register(uint16_t offset);
// All known registers, ascending by offset.
std::span<const RegisterInfo> all_registers();
// "CNA_DATA_SIZE0" or "UNKNOWN_0x1234".
std::string register_name(uint16_t offset);

}  // namespace opal::rocket::abi
