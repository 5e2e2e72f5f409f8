// Lowering: a graph node -> one ET kernel launch (kernel id + argument blob),
// per backends/et/abi/et_kernel_abi.h. choose_kernel() is the support check
// (op, dtypes, shapes, strides) with a reason for every refusal; build_args()
// fills the op's Et*Args struct with the device addresses the caller resolves
// (resident weights, staged activations). A KernelCall (id, name, blob) is
// self-contained, so a future fused dispatcher can batch the calls of a
// segment into one launch instead of launching each (docs/backends/et.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/et/driver/driver.h"
#include "graph/graph.h"

namespace opal::et {

struct KernelChoice {
  uint32_t kernel_id = 0;  // ET_K_*; 0 = no kernel (reason says why)
  std::string reason;
  explicit operator bool() const { return kernel_id != 0; }
};

// The activation rows from which a MUL_MAT of each tensor-unit weight type
// runs through the tensor unit (0 = never). The defaults are the measured
// crossover (docs/PERF.md "The tensor-unit crossover": emulated instructions
// and the card model's time, SIMD against the tensor unit, K = N = 576, M = 1
// to 128): F16 from 1 row (the fp16 TensorFMA needs fewer instructions than the
// SIMD kernel's per-dot f16 rounding even for one row), Q8_0 / Q4_0 from 2
// (predicted at 0.59-0.61 of SIMD's time at 2 rows, 0.43-0.45 at 3: the work
// items spread over more minions than SIMD's N/16 harts, although at 2 rows
// they still execute 1.1x SIMD's instructions; one row, decode, stays SIMD:
// 1.6x the instructions for a predicted 0.90).
struct TensorRows {
  uint32_t f16 = 1, q8_0 = 2, q4_0 = 2;
  static TensorRows all(uint32_t rows) { return {rows, rows, rows}; }
};

// The kernel that computes `node`, or why there is none. Does not look at
// whether the device image has it (EtDevice checks that). `tensor_rows`: a
// MUL_MAT of Q8_0 / Q4_0 / F16 weights with at least that type's rows of
// activations runs through the tensor unit (ET_K_MUL_MAT_TU_*) when its shape
// allows (N % 16 == 0, output rows whole 64-byte lines; F16: K % 32 == 0).
KernelChoice choose_kernel(const Tensor& node, const TensorRows& tensor_rows = TensorRows::all(0));

// Whether kernel `id` issues tensor-unit instructions (its launch needs the
// L1 scratchpad: LaunchRequest::scratchpad).
bool uses_tensor_unit(uint32_t kernel_id);

// Where a tensor's element [0,0,0,0] lives on the device.
using DeviceAddressOf = std::function<DevAddr(const Tensor&)>;

struct KernelCall {
  uint32_t kernel_id = 0;
  const char* name = "";  // et_kernel_name(kernel_id)
  std::vector<uint8_t> args;
};

// The harts a launch of `node` needs out of `all`: no more than the 64-byte
// lines of its output (every kernel hands out its output in whole lines, so
// further harts would boot, find no work and stop), at least one; the lowest
// minions of the lowest shires of `all`, both threads as `all`.
HartSet fit_harts(const Tensor& node, const HartSet& all);

// Device scratch (zeroed before the launch) the kernel of `node` can use on
// `harts`, in bytes; 0 = none (EtArgsHeader.scratch).
uint64_t scratch_bytes(const Tensor& node, uint32_t kernel_id, const HartSet& harts);

// The launch of `node` with kernel `kernel_id` on `harts`; `scratch` (0 or
// scratch_bytes() of zeroed device memory) goes into the header.
KernelCall build_call(const Tensor& node, uint32_t kernel_id, const HartSet& harts, const DeviceAddressOf& addr,
                      DevAddr scratch = 0);

// The tensors a node's kernel reads (its sources, in ABI order) and whether
// it writes its output in place into source 0's bytes (KV_STORE).
std::vector<const Tensor*> kernel_sources(const Tensor& node);
bool writes_in_place(const Tensor& node);

}  // namespace opal::et
