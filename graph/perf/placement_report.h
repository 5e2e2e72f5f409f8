// Where the nodes of one scheduled graph run and why, and what that costs:
// the per-model report of `opal ops -m MODEL`. Figures come from the
// scheduler's placement (with its reasons), the cost model (node_cost.h) and
// the scheduler's copies (bytes_copied_per_run).
//
// Views are not counted as nodes (they alias bytes and run nowhere). A
// "fallback" is a node placed on the host although an accelerator is in the
// registry.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/scheduler.h"

namespace opal {

struct PlacementGroup {
  std::string op, backend, reason;
  uint64_t nodes = 0;
  double flops = 0;
  uint64_t bytes = 0;
};

struct BackendShare {
  std::string backend;
  uint64_t nodes = 0;
  double flops = 0;
  uint64_t bytes = 0;
  double node_share = 0;  // percent of all nodes
  double flop_share = 0;  // percent of all FLOPs
};

struct PlacementReport {
  std::string phase;  // "prefill" / "decode"
  int64_t n_tokens = 0;
  uint64_t nodes = 0;  // computing nodes (views excluded)
  uint64_t views = 0;
  double flops = 0;
  uint64_t bytes = 0;
  std::vector<BackendShare> backends;     // every device of the registry that got nodes, by priority
  std::vector<PlacementGroup> groups;     // nodes by (backend, op, reason)
  std::vector<PlacementGroup> fallbacks;  // host nodes while an accelerator is present, by (op, reason)
  double fallback_flops = 0;
  uint64_t fallback_bytes = 0;
  uint64_t segments = 0;
  uint64_t copies = 0;
  uint64_t bytes_copied = 0;  // per graph run (= scheduler's bytes_copied_per_run)
  double bytes_copied_per_token = 0;
};

// A reason with the numbers inside quoted names replaced by N, so that the
// same decision for every layer groups: "reads 'blk.N.attn_q.weight' held on x".
std::string generic_reason(const std::string& reason);

PlacementReport placement_report(const ScheduledGraph& sg, const Registry& reg, int64_t n_tokens, std::string phase);

}  // namespace opal
