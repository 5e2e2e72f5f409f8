// `opal ops [--backend NAME[,NAME]] [-o md|csv]`: the op x dtype x backend
// support matrix from every backend's supports() and its reasons
// (docs/ops.md is this output; scripts/gen_ops_md.sh regenerates it).
//
// `opal ops -m MODEL [-c N] [--prefill N] [--backend ...] [-o md|json]`: for
// one model, which nodes run where and why, the share of nodes and FLOPs per
// backend, the ops that fall back to the CPU and their cost, and the bytes
// copied between backends per token, for prefill and for decode.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "backends/factory/backend_factory.h"
#include "backends/factory/support_matrix.h"
#include "core/error.h"
#include "graph/perf/placement_report.h"
#include "models/model.h"
#include "runtime/context.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/load_options.h"

namespace opal::tools {
namespace {

struct OpsOptions {
  std::string backends, format = "md", model, et_fusion = "on";
  int64_t n_ctx = 512, prefill = 0;
  int threads = 1;
};

nlohmann::json to_json(const PlacementReport& r) {
  using nlohmann::json;
  json j;
  j["phase"] = r.phase;
  j["tokens"] = r.n_tokens;
  j["nodes"] = r.nodes;
  j["views"] = r.views;
  j["flops"] = r.flops;
  j["bytes"] = r.bytes;
  j["segments"] = r.segments;
  j["copies"] = r.copies;
  j["bytes_copied"] = r.bytes_copied;
  j["bytes_copied_per_token"] = r.bytes_copied_per_token;
  j["fallback_flops"] = r.fallback_flops;
  j["fallback_bytes"] = r.fallback_bytes;
  for (const BackendShare& b : r.backends)
    j["backends"].push_back({{"backend", b.backend},
                             {"nodes", b.nodes},
                             {"flops", b.flops},
                             {"bytes", b.bytes},
                             {"node_share", b.node_share},
                             {"flop_share", b.flop_share}});
  auto groups = [](const std::vector<PlacementGroup>& gs) {
    json a = json::array();
    for (const PlacementGroup& g : gs)
      a.push_back({{"backend", g.backend},
                   {"op", g.op},
                   {"reason", g.reason},
                   {"nodes", g.nodes},
                   {"flops", g.flops},
                   {"bytes", g.bytes}});
    return a;
  };
  j["placement"] = groups(r.groups);
  j["fallbacks"] = groups(r.fallbacks);
  return j;
}

std::string to_text(const PlacementReport& r) {
  std::string s = fmt::format("\n## {} ({} token{})\n\n", r.phase, r.n_tokens, r.n_tokens == 1 ? "" : "s");
  s += fmt::format("{} nodes ({} views not counted), {:.4g} GFLOP, {:.4g} MB moved by kernels\n\n", r.nodes, r.views,
                   r.flops * 1e-9, double(r.bytes) * 1e-6);
  s += "| backend | nodes | node share | GFLOP | FLOP share |\n|---|---:|---:|---:|---:|\n";
  for (const BackendShare& b : r.backends)
    s += fmt::format("| {} | {} | {:.1f} % | {:.4g} | {:.1f} % |\n", b.backend, b.nodes, b.node_share, b.flops * 1e-9,
                     b.flop_share);
  s += "\n### Placement and reasons\n\n| backend | op | nodes | GFLOP | reason |\n|---|---|---:|---:|---|\n";
  for (const PlacementGroup& g : r.groups)
    s += fmt::format("| {} | {} | {} | {:.4g} | {} |\n", g.backend, g.op, g.nodes, g.flops * 1e-9, g.reason);
  if (!r.fallbacks.empty()) {
    s += fmt::format("\n### CPU fallbacks: {:.4g} GFLOP ({:.1f} % of all), {:.4g} MB\n\n", r.fallback_flops * 1e-9,
                     r.flops > 0 ? 100.0 * r.fallback_flops / r.flops : 0.0, double(r.fallback_bytes) * 1e-6);
    s += "| op | nodes | GFLOP | FLOP share | MB | reason |\n|---|---:|---:|---:|---:|---|\n";
    for (const PlacementGroup& f : r.fallbacks)
      s += fmt::format("| {} | {} | {:.4g} | {:.1f} % | {:.4g} | {} |\n", f.op, f.nodes, f.flops * 1e-9,
                       r.flops > 0 ? 100.0 * f.flops / r.flops : 0.0, double(f.bytes) * 1e-6, f.reason);
  }
  s += fmt::format(
      "\n### Copies between backends\n\n{} segment(s), {} copies, {} bytes per run = {:.1f} bytes per token\n",
      r.segments, r.copies, r.bytes_copied, r.bytes_copied_per_token);
  return s;
}

int run_model_report(const OpsOptions& o) {
  if (o.n_ctx < 2) fail("-c must be at least 2, got {}", o.n_ctx);
  BackendTuning tuning;
  tuning.et_fusion = o.et_fusion != "off";
  auto reg = make_registry(parse_backend_list(o.backends), o.threads, tuning);
  auto model = Model::load(o.model, *reg);
  ContextParams cp;
  cp.n_ctx = o.n_ctx;
  const int64_t prefill = o.prefill > 0 ? o.prefill : std::min<int64_t>(o.n_ctx, 512);
  if (prefill > o.n_ctx) fail("--prefill {} exceeds the context (-c {})", prefill, o.n_ctx);
  cp.n_batch = cp.n_ubatch = prefill;
  Context ctx(*model, cp);
  const PlacementReport pre = placement_report(ctx.bucket(prefill, 1), *reg, prefill, "prefill");
  const PlacementReport dec = placement_report(ctx.bucket(1, 1), *reg, 1, "decode");

  // weights per device
  std::map<std::string, std::pair<uint64_t, uint64_t>> wdev;  // device -> (count, bytes)
  std::map<std::pair<std::string, std::string>, uint64_t> wreasons;
  for (const auto& [t, p] : model->weight_placement()) {
    auto& w = wdev[p.device->name()];
    ++w.first;
    w.second += t->nbytes();
    ++wreasons[{p.device->name(), generic_reason(p.reason)}];
  }
  if (o.format == "json") {
    nlohmann::json j;
    j["model"] = o.model;
    for (const Device* d : reg->devices()) j["devices"].push_back(d->name());
    for (const auto& [d, w] : wdev) j["weights"][d] = {{"count", w.first}, {"bytes", w.second}};
    j["prefill"] = to_json(pre);
    j["decode"] = to_json(dec);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (o.format != "md") fail("-o must be md or json with -m, got '{}'", o.format);
  std::string s = fmt::format("# Placement of {}\n\ndevices (by priority):", o.model);
  for (const Device* d : reg->devices()) s += fmt::format(" {} ({})", d->name(), d->priority());
  s += "\n\n### Weights\n\n| device | weights | reason |\n|---|---:|---|\n";
  for (const auto& [k, n] : wreasons) s += fmt::format("| {} | {} | {} |\n", k.first, n, k.second);
  for (const auto& [d, w] : wdev) s += fmt::format("\n{}: {} weights, {:.4g} MB", d, w.first, double(w.second) * 1e-6);
  s += "\n" + to_text(pre) + to_text(dec);
  std::fputs(s.c_str(), stdout);
  return 0;
}

int run_ops(const OpsOptions& o) {
  if (!o.model.empty()) return run_model_report(o);
  const SupportMatrix m = support_matrix(parse_backend_list(o.backends));
  for (const std::string& u : m.unavailable) std::fprintf(stderr, "opal ops: left out %s\n", u.c_str());
  if (o.format == "md") std::fputs(m.markdown().c_str(), stdout);
  else if (o.format == "csv") std::fputs(m.csv().c_str(), stdout);
  else fail("-o must be md or csv, got '{}'", o.format);
  return 0;
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto o = std::make_shared<OpsOptions>();
  CLI::App* sub = app.add_subcommand(
      "ops",
      "Op support matrix per backend (docs/ops.md), or with -m where a model's nodes run, why, and at what cost");
  sub->add_option(
      "--backend,--backends", o->backends,
      "backends, comma-separated (matrix: default all; with -m the CPU is always added). Known: " + backend_names());
  add_backend_tuning_options(sub, o->et_fusion);
  sub->add_option("-o,--output", o->format, "md (default), csv (matrix) or json (with -m)");
  sub->add_option("-m,--model", o->model, "GGUF model: report its placement instead of the matrix");
  add_hub_options(sub, &o->model);
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size for the report (512)");
  sub->add_option("--prefill", o->prefill, "prompt tokens of the prefill graph (default min(-c, 512))");
  sub->add_option("-t,--threads", o->threads, "threads (1)");
  set_action(sub, [o] { return run_ops(*o); });
}

}  // namespace opal::tools
