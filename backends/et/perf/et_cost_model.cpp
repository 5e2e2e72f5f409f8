// The ET-SoC-1 card model (et_cost_model.h).
#include "backends/et/perf/et_cost_model.h"

#include <fmt/format.h>

#include <algorithm>

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

double predict_node_s(const Tensor& n, uint64_t insns, const CardModel& m) {
  const uint64_t lines = std::max<uint64_t>(1, (n.nbytes() + 63) / 64);
  const uint64_t minions = std::clamp<uint64_t>((lines + 1) / 2, 1, m.minions);
  const double compute_s = double(insns) / (double(minions) * m.clock_hz);
  return std::max(compute_s, roofline_node_s(n, m));
}

}  // namespace opal::et
