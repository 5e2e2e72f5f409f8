// ET launch cost (et_perf.h).
#include "backends/et/perf/et_perf.h"

#include "graph/perf/node_cost.h"

namespace opal::et {

LaunchPerf launch_perf(const Tensor& node, const char* kernel, const LaunchResult& r, uint64_t staged_in,
                       uint64_t staged_out) {
  LaunchPerf p;
  p.kernel = kernel;
  p.cycles = r.cycles;
  p.kernel_cycles = r.kernel_cycles;
  p.harts = r.harts;
  NodeCost c = node_cost(node);
  p.flops = c.flops;
  p.bytes = c.bytes;
  p.staged_in = staged_in;
  p.staged_out = staged_out;
  p.insns = r.hart_cycles;
  return p;
}

}  // namespace opal::et
