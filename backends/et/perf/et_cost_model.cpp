// The ET-SoC-1 card model (et_cost_model.h).
#include "backends/et/perf/et_cost_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "backends/et/lower/lower.h"
#include "graph/perf/node_cost.h"

namespace opal::et {

const CardModel& card_model() {
  static const CardModel m;
  return m;
}

std::string card_model_description() {
  const CardModel& m = card_model();
  return fmt::format(
      "ET-SoC-1 card model: {} minions at {:.0f} MHz, {:.0f} GB/s DRAM, {:.1f} ms per launch, {:.0f} us per fused "
      "barrier, no overlap; emulated instruction counts, docs/backends/et.md",
      m.minions, m.clock_hz / 1e6, m.dram_bytes_per_s / 1e9, m.launch_s * 1e3, m.barrier_s * 1e6);
}

double roofline_node_s(const Tensor& n, const CardModel& m) { return double(node_cost(n).bytes) / m.dram_bytes_per_s; }

namespace {
// Work items of a tensor-unit MUL_MAT: (batch, 16 activation rows, 16 weight rows), split over
// the minions (matmul.c mul_mat_tensor).
uint64_t tensor_items(const Tensor& n) {
  return uint64_t(n.ne[0]) / 16 * ((uint64_t(n.ne[1]) + 15) / 16) * uint64_t(n.ne[2]) * uint64_t(n.ne[3]);
}
uint64_t tensor_minions(const Tensor& n, const CardModel& m) {
  return std::clamp<uint64_t>(tensor_items(n), 1, m.minions);
}
}  // namespace

double tensor_unit_s(const Tensor& n, const CardModel& m) {
  const uint64_t minions = tensor_minions(n, m), blocks = uint64_t(n.src[0]->ne[0]) / 32;
  const uint64_t tiles_per_minion = (tensor_items(n) + minions - 1) / minions * blocks;
  const double macs_per_cycle =
      n.src[0]->type == DType::F16 ? m.tensor_fp16_macs_per_cycle : m.tensor_int8_macs_per_cycle;
  return double(tiles_per_minion) * (16.0 * 16.0 * 32.0 / macs_per_cycle) / m.clock_hz;
}

double predict_node_s(const Tensor& n, uint64_t insns, uint32_t kernel_id, const CardModel& m) {
  if (uses_tensor_unit(kernel_id)) {
    const double compute_s = double(insns) / (double(tensor_minions(n, m)) * m.clock_hz) + tensor_unit_s(n, m);
    return std::max(compute_s, roofline_node_s(n, m));
  }
  uint64_t harts = std::max<uint64_t>(1, (n.nbytes() + 63) / 64);  // one per output line
  if (n.op == Op::MulMat && n.ne[0] % 16 == 0) harts = std::min<uint64_t>(harts, uint64_t(n.ne[0]) / 16);
  const uint64_t minions = std::clamp<uint64_t>((harts + 1) / 2, 1, m.minions);
  const double compute_s = double(insns) / (double(minions) * m.clock_hz);
  return std::max(compute_s, roofline_node_s(n, m));
}

}  // namespace opal::et
