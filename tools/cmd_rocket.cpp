// `opal rocket replay CASE_DIR/case.json --out DIR`: rebuilds a Mesa golden
// case with Opal's regcmd builder and writes regcmd.bin, weights.bin,
// biases.bin, input.bin in the golden formats.
// `opal rocket run-case CASE_DIR/case.json`: runs the case's jobs on the NPU
// emulator and compares the output with the integer reference.
#include <fmt/format.h>

#include "backends/rocket/replay/golden_case.h"
#include "core/error.h"
#include "tools/commands.h"

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
}

}  // namespace opal::tools
