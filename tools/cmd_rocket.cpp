// `opal rocket replay CASE_DIR/case.json --out DIR`: rebuilds a Mesa golden
// case with Opal's regcmd builder and writes regcmd.bin, weights.bin,
// biases.bin, input.bin in the golden formats.
// `opal rocket run-case CASE_DIR/case.json`: runs the case's jobs on the NPU
// emulator and compares the output with the integer reference.
// `opal rocket predict (--preset NAME | -m MODEL.gguf | --all-presets) [-p N]`:
// predicted RK3588 prefill time and tokens/s of the model's matmuls under the
// NPU performance model (backends/rocket/perf/perf_model.h).
#include <fmt/format.h>

#include <map>

#include "backends/rocket/perf/perf_model.h"
#include "backends/rocket/replay/golden_case.h"
#include "core/error.h"
#include "core/gguf.h"
#include "tools/commands.h"
#include "tools/load_options.h"

namespace opal::tools {
namespace {

using namespace opal::rocket;

struct RocketOptions {
  std::string case_json;
  std::string out_dir;
  std::string policy = "mesa";
  std::string rounding = "half-away";
  uint32_t iova_base = 0x10000000;
  bool strict = false;
};

Policy parse_policy(const std::string& s) {
  if (s == "mesa") return Policy::Mesa;
  if (s == "opal") return Policy::Opal;
  fail("--policy must be 'mesa' or 'opal', not '{}'", s);
}

int run_replay(const RocketOptions& o) {
  const GoldenCase c = load_golden_case(o.case_json);
  const ReplayResult r = replay_case(c, parse_policy(o.policy), o.iova_base);
  write_replay_files(r, o.out_dir);
  unsigned tasks = 0;
  for (const auto& j : r.jobs) tasks += unsigned(j.tasks.size());
  fmt::print("{}: {} jobs, {} tasks, {} regcmd entries -> {}/{{regcmd,weights,biases,input}}.bin\n", c.name,
             r.jobs.size(), tasks, r.regcmd.entries.size(), o.out_dir);
  return 0;
}

int run_case(const RocketOptions& o) {
  const GoldenCase c = load_golden_case(o.case_json);
  EmulatorOptions eo;
  eo.out_cvt_rounding = parse_rounding(o.rounding);
  eo.require_resident_weights = o.strict;
  eo.reject_wrapped_surface_stride = o.strict;
  const EmulatedRun run = run_case_on_emulator(c, parse_policy(o.policy), eo);
  const ReferenceOutput ref = reference_output(c, eo.out_cvt_rounding);
  const unsigned bo_rows = run.replay.compiled.op.out_height;
  size_t mismatches = 0, total = 0;
  for (unsigned r = 0; r < ref.rows; r++)
    for (unsigned col = 0; col < ref.cols; col++)
      for (unsigned n = 0; n < ref.channels; n++, total++) {
        const int8_t got = int8_t(run.output_bo.at(((size_t(n / 16) * bo_rows + r) * ref.cols + col) * 16 + n % 16));
        if (got != ref.output[(size_t(r) * ref.cols + col) * ref.channels + n]) mismatches++;
      }
  for (const std::string& w : run.warnings) fmt::print("warning: {}\n", w);
  fmt::print("{}: policy {}, {} tasks, rounding {}: {} of {} outputs differ from the integer reference\n", c.name,
             o.policy, run.tasks.size(), rounding_name(eo.out_cvt_rounding), mismatches, total);
  return mismatches == 0 ? 0 : 1;
}

struct PredictOptions {
  std::string preset, model, schedule = "opal", precision = precision_name(kDefaultPrecision);
  bool all_presets = false, per_shape = false;
  unsigned tokens = 512, cores = 3, group = 0;
  double clock_mhz = 1000, ddr_gbps = 20, task_us = -1, job_us = -1, efficiency = -1, host_gbps = -1;
};

// Weight shapes of a GGUF file's decoder blocks ("blk.N.x.weight", 2-D),
// grouped by name suffix and shape. MoE experts (3-D) are left out.
std::vector<MatmulShape> gguf_shapes(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  std::map<std::tuple<std::string, unsigned, unsigned>, unsigned> count;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.ne.size() != 2 || t.name.rfind("blk.", 0) != 0) continue;
    const size_t dot = t.name.find('.', 4);
    if (dot == std::string::npos) continue;
    std::string suffix = t.name.substr(dot + 1);
    if (suffix.ends_with(".weight")) suffix.resize(suffix.size() - 7);
    count[{suffix, unsigned(t.ne[0]), unsigned(t.ne[1])}]++;
  }
  std::vector<MatmulShape> shapes;
  for (const auto& [key, n] : count) shapes.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), n});
  if (shapes.empty()) fail("{}: no 2-D blk.N.*.weight tensors to predict", path);
  return shapes;
}

void print_prediction(const std::string& name, const std::vector<MatmulShape>& shapes, const PredictOptions& o,
                      const PerfParams& p) {
  const ModelPrediction m = predict_prefill(shapes, o.tokens, p, o.group);
  if (o.per_shape)
    for (const auto& [s, pr] : m.per_shape)
      fmt::print("  {:<14} K {:>5} N {:>6} x{:<3} {:>9.3f} ms  ({} tasks, {} jobs, {:.1f} MB DDR)\n", s.name, s.k, s.n,
                 s.count, pr.seconds * 1e3, pr.tasks, pr.jobs, pr.ddr_bytes / 1e6);
  fmt::print(
      "{:<16} pp{} {} schedule ({}), {} core(s) at {:.0f} MHz, DDR {:.0f} GB/s: {:8.1f} ms (NPU {:.1f} ms, "
      "host {:.1f} ms) -> {:7.1f} tokens/s\n",
      name, o.tokens, p.schedule, p.schedule == "fork" ? "w8a8" : precision_name(p.precision), p.cores,
      p.clock_hz / 1e6, p.ddr_bytes_per_s / 1e9, m.total.seconds * 1e3, m.total.npu_seconds * 1e3,
      m.total.host_seconds * 1e3, m.tokens_per_s);
}

int run_predict(const PredictOptions& o) {
  PerfParams p;
  p.clock_hz = o.clock_mhz * 1e6;
  p.cores = o.cores;
  p.ddr_bytes_per_s = o.ddr_gbps * 1e9;
  p.schedule = o.schedule;
  p.precision = parse_precision(o.precision);
  if (o.task_us >= 0) p.task_overhead_s = o.task_us * 1e-6;
  if (o.job_us >= 0) p.job_overhead_s = o.job_us * 1e-6;
  if (o.efficiency > 0) p.mac_efficiency = o.efficiency;
  if (o.host_gbps > 0) p.host_bytes_per_s = o.host_gbps * 1e9;
  if (o.tokens == 0) fail("-p: the prompt needs at least one token");
  if (o.cores == 0 || o.cores > 3) fail("--cores: {} (1..3)", o.cores);
  const int sources = int(!o.preset.empty()) + int(!o.model.empty()) + int(o.all_presets);
  if (sources != 1) fail("rocket predict: give exactly one of --preset, -m, --all-presets");
  if (!o.model.empty()) {
    print_prediction(o.model, gguf_shapes(o.model), o, p);
    return 0;
  }
  bool found = false;
  for (const ModelPreset& m : model_presets())
    if (o.all_presets || m.name == o.preset) {
      print_prediction(m.name, preset_shapes(m), o, p);
      found = true;
    }
  if (!found) {
    std::string names;
    for (const ModelPreset& m : model_presets()) names += (names.empty() ? "" : ", ") + m.name;
    fail("--preset: unknown model '{}' (known: {})", o.preset, names);
  }
  return 0;
}

}  // namespace

void add_rocket_command(CLI::App& app) {
  CLI::App* rocket = app.add_subcommand("rocket", "RK3588 NPU (rocket driver) developer tools");
  rocket->require_subcommand(1);

  auto ro = std::make_shared<RocketOptions>();
  CLI::App* replay = rocket->add_subcommand("replay", "Rebuild a Mesa golden case with Opal's regcmd builder");
  replay->add_option("case", ro->case_json, "CASE_DIR/case.json")->required();
  replay->add_option("--out", ro->out_dir, "Output folder")->required();
  replay->add_option("--policy", ro->policy, "mesa (byte-compatible) or opal (Opal's tiling)");
  replay->add_option("--iova-base", ro->iova_base, "First buffer address (golden data: 0x10000000)");
  set_action(replay, [ro] { return run_replay(*ro); });

  auto co = std::make_shared<RocketOptions>();
  CLI::App* run = rocket->add_subcommand("run-case", "Run a golden case on the NPU emulator and compare");
  run->add_option("case", co->case_json, "CASE_DIR/case.json")->required();
  run->add_option("--policy", co->policy, "mesa or opal");
  run->add_option("--rounding", co->rounding, "OUT_CVT rounding: half-away, half-up, half-even, truncate");
  run->add_flag("--strict", co->strict, "Reject non-resident weights and wrapped surface strides");
  set_action(run, [co] { return run_case(*co); });

  auto po = std::make_shared<PredictOptions>();
  CLI::App* pr = rocket->add_subcommand("predict", "Predicted RK3588 NPU prefill tokens/s (performance model)");
  pr->add_option("--preset", po->preset, "Published model shapes: qwen2-0.5b, qwen3-0.6b, tinyllama-1.1b, ...");
  pr->add_option("-m,--model", po->model, "GGUF file whose blk.N.*.weight shapes to use");
  add_hub_options(pr, &po->model);  // -hf / -hff / -mu: the GGUF by name
  pr->add_flag("--all-presets", po->all_presets, "Every preset");
  pr->add_option("-p,--n-prompt", po->tokens, "Prompt tokens (M)");
  pr->add_option("--clock-mhz", po->clock_mhz, "NPU clock (mainline default 200, vendor 1000)");
  pr->add_option("--cores", po->cores, "NPU cores used (1..3)");
  pr->add_option("--ddr-gbps", po->ddr_gbps, "DDR bandwidth available to the NPU, GB/s");
  pr->add_option("--task-us", po->task_us, "Fixed cost per task, microseconds");
  pr->add_option("--job-us", po->job_us, "Fixed cost per job, microseconds");
  pr->add_option("--efficiency", po->efficiency, "Achieved fraction of the peak MAC rate");
  pr->add_option("--host-gbps", po->host_gbps, "Host quantize/pack/unpack rate, GB/s");
  pr->add_option("--schedule", po->schedule, "opal (Opal's tiling) or fork (the int8 llama.cpp fork's)");
  pr->add_option("--group", po->group, "K channels per int8 scale (0: per row)");
  pr->add_option("--precision", po->precision, "Operand planes: w16a16 (default), w8a16, w16a8, w8a8");
  pr->add_flag("--per-shape", po->per_shape, "One line per matmul shape");
  set_action(pr, [po] { return run_predict(*po); });
}

}  // namespace opal::tools
