// What one ET launch cost, as the perf stream and `opal bench` see it: the
// fields of the published backend's ET_PERF lines that apply here
// (../shared/docs/et-soc.md §3.5: op, kernel, tensor, shape, duration,
// start/end, flops) plus what the emulator knows: emulated cycles of the
// launch, the slowest hart's cycles inside the kernel, the harts used and the
// bytes staged. Cycles on sw-sysemu are one instruction per hart per cycle,
// round-robin: a functional count, not ET-SoC-1 time (docs/backends/et.md).
#pragma once
#include <cstdint>
#include <string>

#include "backends/et/driver/driver.h"
#include "graph/graph.h"

namespace opal::et {

struct LaunchPerf {
  const char* kernel = "";     // et_kernel_name
  uint64_t cycles = 0;         // emulated cycles of the launch, boot stub included
  uint64_t kernel_cycles = 0;  // the slowest hart inside the kernel
  unsigned harts = 0;
  double flops = 0;  // the node's cost model (graph/perf/node_cost.h)
  uint64_t bytes = 0;
  uint64_t staged_in = 0, staged_out = 0;  // bytes copied host <-> device for the launch
  uint64_t insns = 0;                      // emulated instructions in the kernel (every hart's cycles summed)
  unsigned launches = 1;                   // device launches this node started (fused: 1 for a group's first node)
};

LaunchPerf launch_perf(const Tensor& node, const char* kernel, const LaunchResult& r, uint64_t staged_in,
                       uint64_t staged_out);

// The counters of a launch in the order RunHooks::node_counter reports them
// (name, value): et_cycles, et_kernel_cycles, et_harts, et_staged_bytes,
// et_insns, et_launches. In a fused launch (docs/backends/et.md) the group's
// first node carries the launch's cycles, bytes and et_launches = 1, every
// node its own sub-op's et_insns, et_harts and et_kernel_cycles (its
// cycles as insns / harts).
template <class F>
void for_each_counter(const LaunchPerf& p, F&& f) {
  f("et_cycles", double(p.cycles));
  f("et_kernel_cycles", double(p.kernel_cycles));
  f("et_harts", double(p.harts));
  f("et_staged_bytes", double(p.staged_in + p.staged_out));
  f("et_insns", double(p.insns));
  f("et_launches", double(p.launches));
}

}  // namespace opal::et
