// The register table behind find_register(): one row per register a task may
// program. The emulator rejects any offset not listed here.
#include "backends/rocket/abi/registers.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace opal::rocket::abi {
namespace {

using B = Block;
constexpr RegisterInfo kRegisters[] = {
    {0x0008, B::PC, "PC_OPERATION_ENABLE", false, false},
    {0x0010, B::PC, "PC_BASE_ADDRESS", false, true},
    {0x0014, B::PC, "PC_REGISTER_AMOUNTS", false, false},
    {0x100c, B::CNA, "CNA_CONV_CON1", false, false},
    {0x1010, B::CNA, "CNA_CONV_CON2", false, false},
    {0x1014, B::CNA, "CNA_CONV_CON3", false, false},
    {0x1020, B::CNA, "CNA_DATA_SIZE0", false, false},
    {0x1024, B::CNA, "CNA_DATA_SIZE1", false, false},
    {0x1028, B::CNA, "CNA_DATA_SIZE2", false, false},
    {0x102c, B::CNA, "CNA_DATA_SIZE3", false, false},
    {0x1030, B::CNA, "CNA_WEIGHT_SIZE0", false, false},
    {0x1034, B::CNA, "CNA_WEIGHT_SIZE1", false, false},
    {0x1038, B::CNA, "CNA_WEIGHT_SIZE2", false, false},
    {0x1040, B::CNA, "CNA_CBUF_CON0", false, false},
    {0x1044, B::CNA, "CNA_CBUF_CON1", false, false},
    {0x104c, B::CNA, "CNA_CVT_CON0", false, false},
    {0x1050, B::CNA, "CNA_CVT_CON1", false, false},
    {0x1054, B::CNA, "CNA_CVT_CON2", false, false},
    {0x1058, B::CNA, "CNA_CVT_CON3", false, false},
    {0x105c, B::CNA, "CNA_CVT_CON4", false, false},
    {0x1060, B::CNA, "CNA_FC_CON0", false, false},
    {0x1064, B::CNA, "CNA_FC_CON1", false, false},
    {0x1068, B::CNA, "CNA_PAD_CON0", false, false},
    {0x1070, B::CNA, "CNA_FEATURE_DATA_ADDR", false, true},
    {0x1074, B::CNA, "CNA_FC_CON2", false, false},
    {0x1078, B::CNA, "CNA_DMA_CON0", false, false},
    {0x107c, B::CNA, "CNA_DMA_CON1", false, false},
    {0x1080, B::CNA, "CNA_DMA_CON2", false, false},
    {0x1084, B::CNA, "CNA_FC_DATA_SIZE0", false, false},
    {0x1088, B::CNA, "CNA_FC_DATA_SIZE1", false, false},
    {0x1100, B::CNA, "CNA_DCOMP_CTRL", false, false},
    {0x1104, B::CNA, "CNA_DCOMP_REGNUM", false, false},
    {0x1110, B::CNA, "CNA_DCOMP_ADDR0", false, true},
    {0x1140, B::CNA, "CNA_DCOMP_AMOUNT0", false, false},
    {0x1144, B::CNA, "CNA_DCOMP_AMOUNT1", false, false},
    {0x1148, B::CNA, "CNA_DCOMP_AMOUNT2", false, false},
    {0x114c, B::CNA, "CNA_DCOMP_AMOUNT3", false, false},
    {0x1150, B::CNA, "CNA_DCOMP_AMOUNT4", false, false},
    {0x1154, B::CNA, "CNA_DCOMP_AMOUNT5", false, false},
    {0x1158, B::CNA, "CNA_DCOMP_AMOUNT6", false, false},
    {0x115c, B::CNA, "CNA_DCOMP_AMOUNT7", false, false},
    {0x1160, B::CNA, "CNA_DCOMP_AMOUNT8", false, false},
    {0x1164, B::CNA, "CNA_DCOMP_AMOUNT9", false, false},
    {0x1168, B::CNA, "CNA_DCOMP_AMOUNT10", false, false},
    {0x116c, B::CNA, "CNA_DCOMP_AMOUNT11", false, false},
    {0x1170, B::CNA, "CNA_DCOMP_AMOUNT12", false, false},
    {0x1174, B::CNA, "CNA_DCOMP_AMOUNT13", false, false},
    {0x1178, B::CNA, "CNA_DCOMP_AMOUNT14", false, false},
    {0x117c, B::CNA, "CNA_DCOMP_AMOUNT15", false, false},
    {0x1180, B::CNA, "CNA_CVT_CON5", false, false},
    {0x1184, B::CNA, "CNA_PAD_CON1", false, false},
    {0x3010, B::CORE, "CORE_MISC_CFG", false, false},
    {0x3014, B::CORE, "CORE_DATAOUT_SIZE_0", false, false},
    {0x3018, B::CORE, "CORE_DATAOUT_SIZE_1", false, false},
    {0x301c, B::CORE, "CORE_CLIP_TRUNCATE", false, false},
    {0x3030, B::CORE, "CORE_UNDOCUMENTED_3030", true, false},
    {0x4004, B::DPU, "DPU_S_POINTER", false, false},
    {0x400c, B::DPU, "DPU_FEATURE_MODE_CFG", false, false},
    {0x4010, B::DPU, "DPU_DATA_FORMAT", false, false},
    {0x4014, B::DPU, "DPU_OFFSET_PEND", false, false},
    {0x4020, B::DPU, "DPU_DST_BASE_ADDR", false, true},
    {0x4024, B::DPU, "DPU_DST_SURF_STRIDE", false, false},
    {0x4030, B::DPU, "DPU_DATA_CUBE_WIDTH", false, false},
    {0x4034, B::DPU, "DPU_DATA_CUBE_HEIGHT", false, false},
    {0x4038, B::DPU, "DPU_DATA_CUBE_NOTCH_ADDR", false, false},
    {0x403c, B::DPU, "DPU_DATA_CUBE_CHANNEL", false, false},
    {0x4040, B::DPU, "DPU_BS_CFG", false, false},
    {0x4044, B::DPU, "DPU_BS_ALU_CFG", false, false},
    {0x4048, B::DPU, "DPU_BS_MUL_CFG", false, false},
    {0x404c, B::DPU, "DPU_BS_RELUX_CMP_VALUE", false, false},
    {0x4050, B::DPU, "DPU_BS_OW_CFG", false, false},
    {0x4054, B::DPU, "DPU_BS_OW_OP", false, false},
    {0x4058, B::DPU, "DPU_WDMA_SIZE_0", false, false},
    {0x405c, B::DPU, "DPU_WDMA_SIZE_1", false, false},
    {0x4060, B::DPU, "DPU_BN_CFG", false, false},
    {0x4064, B::DPU, "DPU_BN_ALU_CFG", false, false},
    {0x4068, B::DPU, "DPU_BN_MUL_CFG", false, false},
    {0x406c, B::DPU, "DPU_BN_RELUX_CMP_VALUE", false, false},
    {0x4070, B::DPU, "DPU_EW_CFG", false, false},
    {0x4074, B::DPU, "DPU_EW_CVT_OFFSET_VALUE", false, false},
    {0x4078, B::DPU, "DPU_EW_CVT_SCALE_VALUE", false, false},
    {0x407c, B::DPU, "DPU_EW_RELUX_CMP_VALUE", false, false},
    {0x4080, B::DPU, "DPU_OUT_CVT_OFFSET", false, false},
    {0x4084, B::DPU, "DPU_OUT_CVT_SCALE", false, false},
    {0x4088, B::DPU, "DPU_OUT_CVT_SHIFT", false, false},
    {0x4090, B::DPU, "DPU_EW_OP_VALUE_0", false, false},
    {0x4094, B::DPU, "DPU_EW_OP_VALUE_1", false, false},
    {0x4098, B::DPU, "DPU_EW_OP_VALUE_2", false, false},
    {0x409c, B::DPU, "DPU_EW_OP_VALUE_3", false, false},
    {0x40a0, B::DPU, "DPU_EW_OP_VALUE_4", false, false},
    {0x40a4, B::DPU, "DPU_EW_OP_VALUE_5", false, false},
    {0x40a8, B::DPU, "DPU_EW_OP_VALUE_6", false, false},
    {0x40ac, B::DPU, "DPU_EW_OP_VALUE_7", false, false},
    {0x40c0, B::DPU, "DPU_SURFACE_ADD", false, false},
    {0x40c4, B::DPU, "DPU_UNDOCUMENTED_40c4", true, false},
    {0x4100, B::DPU, "DPU_LUT_ACCESS_CFG", false, false},
    {0x4104, B::DPU, "DPU_LUT_ACCESS_DATA", false, false},
    {0x4108, B::DPU, "DPU_LUT_CFG", false, false},
    {0x410c, B::DPU, "DPU_LUT_INFO", false, false},
    {0x4110, B::DPU, "DPU_LUT_LE_START", false, false},
    {0x4114, B::DPU, "DPU_LUT_LE_END", false, false},
    {0x4118, B::DPU, "DPU_LUT_LO_START", false, false},
    {0x411c, B::DPU, "DPU_LUT_LO_END", false, false},
    {0x4120, B::DPU, "DPU_LUT_LE_SLOPE_SCALE", false, false},
    {0x4124, B::DPU, "DPU_LUT_LE_SLOPE_SHIFT", false, false},
    {0x4128, B::DPU, "DPU_LUT_LO_SLOPE_SCALE", false, false},
    {0x412c, B::DPU, "DPU_LUT_LO_SLOPE_SHIFT", false, false},
    {0x5004, B::DPU_RDMA, "DPU_RDMA_RDMA_S_POINTER", false, false},
    {0x500c, B::DPU_RDMA, "DPU_RDMA_RDMA_DATA_CUBE_WIDTH", false, false},
    {0x5010, B::DPU_RDMA, "DPU_RDMA_RDMA_DATA_CUBE_HEIGHT", false, false},
    {0x5014, B::DPU_RDMA, "DPU_RDMA_RDMA_DATA_CUBE_CHANNEL", false, false},
    {0x5018, B::DPU_RDMA, "DPU_RDMA_RDMA_SRC_BASE_ADDR", false, true},
    {0x501c, B::DPU_RDMA, "DPU_RDMA_RDMA_BRDMA_CFG", false, false},
    {0x5020, B::DPU_RDMA, "DPU_RDMA_RDMA_BS_BASE_ADDR", false, true},
    {0x5028, B::DPU_RDMA, "DPU_RDMA_RDMA_NRDMA_CFG", false, false},
    {0x502c, B::DPU_RDMA, "DPU_RDMA_RDMA_BN_BASE_ADDR", false, true},
    {0x5034, B::DPU_RDMA, "DPU_RDMA_RDMA_ERDMA_CFG", false, false},
    {0x5038, B::DPU_RDMA, "DPU_RDMA_RDMA_EW_BASE_ADDR", false, true},
    {0x5040, B::DPU_RDMA, "DPU_RDMA_RDMA_EW_SURF_STRIDE", false, false},
    {0x5044, B::DPU_RDMA, "DPU_RDMA_RDMA_FEATURE_MODE_CFG", false, false},
    {0x5048, B::DPU_RDMA, "DPU_RDMA_RDMA_SRC_DMA_CFG", false, false},
    {0x504c, B::DPU_RDMA, "DPU_RDMA_RDMA_SURF_NOTCH", false, false},
    {0x5064, B::DPU_RDMA, "DPU_RDMA_RDMA_PAD_CFG", false, false},
    {0x5068, B::DPU_RDMA, "DPU_RDMA_RDMA_WEIGHT", false, false},
    {0x506c, B::DPU_RDMA, "DPU_RDMA_RDMA_EW_SURF_NOTCH", false, false},
};

}  // namespace

const char* block_name(Block b) {
  switch (b) {
    case Block::PC: return "PC";
    case Block::CNA: return "CNA";
    case Block::CORE: return "CORE";
    case Block::DPU: return "DPU";
    case Block::DPU_RDMA: return "DPU_RDMA";
  }
  return "?";
}

const RegisterInfo* find_register(uint16_t offset) {
  const auto* end = std::end(kRegisters);
  const auto* it = std::lower_bound(std::begin(kRegisters), end, offset,
                                    [](const RegisterInfo& r, uint16_t o) { return r.offset < o; });
  return it != end && it->offset == offset ? it : nullptr;
}

std::span<const RegisterInfo> all_registers() { return kRegisters; }

std::string register_name(uint16_t offset) {
  const RegisterInfo* r = find_register(offset);
  return r ? std::string(r->name) : fmt::format("UNKNOWN_0x{:04x}", offset);
}

}  // namespace opal::rocket::abi
