// The work one graph node does, for perf events, summaries and placement
// reports: floating-point operations and bytes moved (read + written),
// counted the same way for every backend so that figures compare.
//
// Each op's cost function is a column of its row in the op-info table
// (graph/op_info.h, where NodeCost and the conventions are); node_cost() reads
// the row. Views and leaves cost nothing.
#pragma once
#include "graph/graph.h"
#include "graph/op_info.h"

namespace opal {

NodeCost node_cost(const Tensor& node);

}  // namespace opal
