// One row per op: everything the engine knows about an op outside its
// kernels. The table (graph/op_info.cpp) has exactly Op::Count rows in enum
// order, which a static_assert checks at compile time, so adding an Op value
// without its row does not build, and no consumer guesses a row with a
// `default:`. Consumers read the row:
//   - op_name()                       the name (graph/graph.h);
//   - Graph::new_node                 the arity (sources a node must have);
//   - node_cost() (graph/perf)        FLOPs and bytes for perf events and reports;
//   - perf_log_line() (graph/perf)    the op's own fields of an OPAL_PERF line;
//   - max_nmse() (backends/shadow)    the NMSE tolerance of shadow and conformance;
//   - matrix_dtypes() and the conformance runner (backends/factory): which
//     dtype a one-op test case varies.
// Kernels (backends/*/) and the one-op test cases (backends/factory/op_cases.cpp)
// stay with their backends; docs/adding-an-op.md lists every touch point.
#pragma once
#include <cstdint>
#include <string>

#include "graph/graph.h"

namespace opal {

// The work one node does: floating-point operations and bytes moved (read +
// written), counted the same way for every backend. A multiply-add is 2
// FLOPs; bytes are the bytes of every source as stored (a quantized weight
// counts its quantized bytes) plus the output, unless the row says otherwise.
struct NodeCost {
  double flops = 0;
  uint64_t bytes = 0;
};

// What the dtype of a one-op test case (backends/factory/op_cases.h) is.
enum class OpCaseType : uint8_t {
  None,    // the op computes nothing (no case)
  Weight,  // src[0] is a weight of any dtype (quantized ones too); K must be whole blocks
  Cache,   // the KV cache's type
  Output,  // the output type (CPY)
  Input,   // the input activations' type
};

struct OpInfo {
  Op op;
  const char* name;  // as printed in errors, OPAL_PERF lines, `opal ops` and docs/ops.md
  int n_src;         // sources the op reads: src[0 .. n_src-1]; the rest must be null
  int n_optional;    // of which the last n_optional may be null (ROPE's frequency factors)
  NodeCost (*cost)(const Tensor& node);
  // The op's own "|key=value" fields of an OPAL_PERF line (docs/perf-events.md); "" for none.
  std::string (*perf_fields)(const Tensor& node);
  // The largest NMSE a backend's output may have against the CPU reference
  // (backends/shadow/tolerance.h explains the measure).
  double (*max_nmse)(const Tensor& node);
  OpCaseType case_type;
};

// The row of an op. Throws opal::Error for a value outside the enum.
const OpInfo& op_info(Op op);

}  // namespace opal
