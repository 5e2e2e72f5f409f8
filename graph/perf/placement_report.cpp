#include "graph/perf/placement_report.h"

#include <map>
#include <tuple>

#include "graph/perf/node_cost.h"

namespace opal {

std::string generic_reason(const std::string& reason) {
  std::string o;
  bool quoted = false, in_digits = false;
  for (char c : reason) {
    if (c == '\'') quoted = !quoted;
    const bool digit = quoted && c >= '0' && c <= '9';
    if (digit) {
      if (!in_digits) o += 'N';
    } else {
      o += c;
    }
    in_digits = digit;
  }
  return o;
}

PlacementReport placement_report(const ScheduledGraph& sg, const Registry& reg, int64_t n_tokens, std::string phase) {
  PlacementReport r;
  r.phase = std::move(phase);
  r.n_tokens = n_tokens;
  bool has_accel = false;
  for (const Device* d : reg.devices()) has_accel = has_accel || d->role() != DeviceRole::Host;
  std::map<const Device*, BackendShare> per_dev;
  std::map<std::tuple<std::string, std::string, std::string>, PlacementGroup> groups, fallbacks;
  for (const Tensor* n : sg.graph().nodes()) {
    if (n->op == Op::View) {
      ++r.views;
      continue;
    }
    const Placement& p = sg.placement(n);
    const NodeCost c = node_cost(*n);
    ++r.nodes;
    r.flops += c.flops;
    r.bytes += c.bytes;
    BackendShare& b = per_dev[p.device];
    b.backend = p.device->name();
    ++b.nodes;
    b.flops += c.flops;
    b.bytes += c.bytes;
    const std::string reason = generic_reason(p.reason);
    PlacementGroup& g = groups[{b.backend, op_name(n->op), reason}];
    g.backend = b.backend;
    g.op = op_name(n->op);
    g.reason = reason;
    ++g.nodes;
    g.flops += c.flops;
    g.bytes += c.bytes;
    if (has_accel && p.device->role() == DeviceRole::Host) {
      PlacementGroup& f = fallbacks[{std::string(), op_name(n->op), reason}];
      f.backend = b.backend;
      f.op = op_name(n->op);
      f.reason = reason;
      ++f.nodes;
      f.flops += c.flops;
      f.bytes += c.bytes;
      r.fallback_flops += c.flops;
      r.fallback_bytes += c.bytes;
    }
  }
  for (const Device* d : reg.devices()) {
    auto it = per_dev.find(d);
    if (it == per_dev.end()) continue;
    BackendShare b = it->second;
    b.node_share = r.nodes ? 100.0 * double(b.nodes) / double(r.nodes) : 0.0;
    b.flop_share = r.flops > 0 ? 100.0 * b.flops / r.flops : 0.0;
    r.backends.push_back(b);
  }
  for (auto& [k, g] : groups) r.groups.push_back(g);
  for (auto& [k, f] : fallbacks) r.fallbacks.push_back(f);
  r.segments = sg.segments().size();
  r.copies = sg.n_copies();
  r.bytes_copied = sg.bytes_copied_per_run();
  r.bytes_copied_per_token = n_tokens > 0 ? double(r.bytes_copied) / double(n_tokens) : 0.0;
  return r;
}

}  // namespace opal
