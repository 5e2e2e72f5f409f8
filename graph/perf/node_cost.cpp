// node_cost(): the cost column of the node's op-info row (graph/op_info.cpp).
#include "graph/perf/node_cost.h"

namespace opal {

NodeCost node_cost(const Tensor& node) { return op_info(node.op).cost(node); }

}  // namespace opal
