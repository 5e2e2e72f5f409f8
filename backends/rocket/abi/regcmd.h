// Register-command (regcmd) entries: what the NPU's program controller (PC)
// fetches from memory and writes into the unit registers of one core.
//
// One entry is a little-endian u64:
//   [63:48] target = block id | 1  (PC 0x0101, CNA 0x0201, CORE 0x0801, DPU 0x1001, DPU_RDMA 0x2001)
//   [47:16] 32-bit register value
//   [15:0]  register offset
// An all-zero entry is a no-op. Every task ends in a 4-entry tail:
//   PC_BASE_ADDRESS (next task's regcmd IOVA) or 0, PC_REGISTER_AMOUNTS,
//   the raw 0x0041000000000000 (TRM: must precede op_en), and the raw op_en
//   write 0x0081 / PC_OPERATION_ENABLE with the per-block enable mask.
#pragma once
#include <cstdint>

#include "backends/rocket/abi/registers.h"

namespace opal::rocket::abi {

struct RegcmdEntry {
  uint16_t target;
  uint32_t value;
  uint16_t offset;
};

constexpr uint16_t target_of(Block b) { return uint16_t(uint32_t(b) | 1u); }

constexpr uint64_t encode_entry(uint16_t target, uint16_t offset, uint32_t value) {
  return (uint64_t(target) << 48) | (uint64_t(value) << 16) | uint64_t(offset);
}
constexpr uint64_t encode_entry(Block b, uint16_t offset, uint32_t value) {
  return encode_entry(target_of(b), offset, value);
}
constexpr RegcmdEntry decode_entry(uint64_t e) { return {uint16_t(e >> 48), uint32_t(e >> 16), uint16_t(e & 0xffff)}; }

// The fixed raw entries of the tail.
inline constexpr uint64_t kTailPreOpEnable = 0x0041000000000000ull;
inline constexpr uint16_t kTailOpEnableTarget = 0x0081;
// Enable mask written by Mesa: op_en | CNA | DPU | PPU (bits 0, 2, 3, 4).
inline constexpr uint32_t kMesaOpEnableMask = 0x1d;
inline constexpr unsigned kTailEntries = 4;

// Regcmd blocks of a multi-task buffer are 64-byte aligned (Mesa's choice).
inline constexpr uint32_t kRegcmdTaskAlignment = 64;

// Mesa's value for PC_REGISTER_AMOUNTS in the tail: what the PC fetches for the
// *next* task, ALIGN((next_count - 4) / 2, 2).
constexpr uint32_t mesa_next_amount(uint32_t next_count) {
  uint32_t half = (next_count - kTailEntries) / 2;
  return (half + 1u) & ~1u;
}
// What the kernel writes to PC_REGISTER_AMOUNTS when it starts a task
// (128-bit units minus one).
constexpr uint32_t kernel_start_amount(uint32_t count) { return (count + 1) / 2 - 1; }

}  // namespace opal::rocket::abi
