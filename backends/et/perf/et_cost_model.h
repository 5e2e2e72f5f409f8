// The ET-SoC-1 card model: emulated work -> predicted card time
// (docs/backends/et.md "Predicted performance"). Facts from
// ../shared/docs/et-soc.md: 1,000 MHz minion clock (the runtime's emulated
// device config and the fake device layer), 128,000 MB/s DRAM bandwidth (the
// same config; 137 GB/s theoretical LPDDR4x-4267), 32 compute shires x 32
// minions, a kernel launch in the published backend's log of 3.1 ms (§3.7:
// a decode MUL_MAT of 3.1 ms, a tiny ROPE of 9.3 ms: the smaller is taken).
// Assumed (no card here): a minion retires one instruction per cycle for its
// two harts together; a global barrier across 32 shires costs 2 us; nothing
// overlaps (a sub-op waits for the previous phase).
//
// One node (an op-by-op launch or a fused sub-op) takes
//   max(insns / (minions its split can use x clock), node bytes / bandwidth)
// where insns is the emulated instruction count of its kernel (every hart's
// cycles summed on sw-sysemu: one instruction per hart per cycle) and the
// minions its split can use are its output's 64-byte lines over two harts per
// minion (lower.h fit_harts: no two minions write one line), at most 1,024;
// a SIMD MUL_MAT splits only its weight rows, in groups of 16 (matmul.c), so
// it uses N/16 harts whatever its activation rows (N % 16 == 0; the row split
// of other N keeps the lines rule).
// The bandwidth floor alone (node bytes / bandwidth) is the roofline.
//
// A MUL_MAT through the tensor unit (lower.h uses_tensor_unit) is split in
// work items of 16 activation rows x 16 weight rows (at most that many
// minions, every minion's instructions on the minion) and adds its TensorFMA
// time to the instructions: every 16 x 16 x 32 int8 tile (8,192 MACs; the
// activation rows of each 16-row chunk padded to 16) at 64 int8 MACs per
// cycle per minion, from the published peak (139 int8 TOPS at 1 GHz on 1,024
// minions, ~128 int8 ops per cycle per minion: et-soc.md §1.3), serialized
// with the minion's instructions (the kernel waits for each tile). F16 tiles
// (16 x 16 x 32 fp16, fp32 accumulation) at 32 MACs per cycle: the fp16 rate
// is not published (et-soc.md §1.3 [open]); the emulator's TensorFMA16A32
// takes 2 k per pass where the int8 one takes 4, so at the same pass rate it
// is half the int8 rate (an assumption). The emulator counts a TensorFMA as
// one instruction.
#pragma once
#include <cstdint>
#include <string>

#include "graph/graph.h"

namespace opal::et {

struct CardModel {
  double clock_hz = 1.0e9;
  double dram_bytes_per_s = 128.0e9;
  unsigned minions = 1024;
  double launch_s = 3.1e-3;
  double barrier_s = 2.0e-6;
  double tensor_int8_macs_per_cycle = 64;  // per minion
  double tensor_fp16_macs_per_cycle = 32;  // per minion (assumed: half the int8 rate)
};

const CardModel& card_model();
// One line naming the model's figures, for `opal bench`.
std::string card_model_description();

// Predicted card seconds of node `n` whose kernel `kernel_id` (ET_K_*; 0: a
// SIMD kernel) executed `insns` emulated instructions.
double predict_node_s(const Tensor& n, uint64_t insns, uint32_t kernel_id = 0, const CardModel& m = card_model());
// The tensor-unit seconds of MUL_MAT node `n` on the card (its int8 or fp16
// tiles at the model's MACs per cycle, on the minions its work items can use).
double tensor_unit_s(const Tensor& n, const CardModel& m = card_model());
// The bandwidth floor of node `n`: the bytes it moves / DRAM bandwidth.
double roofline_node_s(const Tensor& n, const CardModel& m = card_model());

}  // namespace opal::et
