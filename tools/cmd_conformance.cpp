// `opal conformance [--mode test|perf|support] [--backend X[,Y]] [--op OP]
//  [--dtype T] [--cases ci|full|rocket|et] [-t N] [--seed S]`: every backend x op
// x dtype x shape against the scalar reference (backends/factory/conformance.h),
// the analogue of ggml's test-backend-ops. Prints one line per case and a
// tally; exits 1 when a case fails in test mode.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "backends/factory/backend_factory.h"
#include "backends/factory/conformance.h"
#include "core/error.h"
#include "tools/commands.h"

namespace opal::tools {
namespace {

struct ConformanceCli {
  std::string mode = "test", backends, op, dtype, cases = "ci";
  int threads = 1;
  uint32_t seed = 1234;
  bool quiet = false;
};

int run_conformance_cmd(const ConformanceCli& cli) {
  ConformanceOptions o;
  if (cli.mode == "test") o.mode = ConformanceMode::Test;
  else if (cli.mode == "perf") o.mode = ConformanceMode::Perf;
  else if (cli.mode == "support") o.mode = ConformanceMode::Support;
  else fail("--mode must be test, perf or support, got '{}'", cli.mode);
  o.backends = parse_backend_list(cli.backends);
  o.op = cli.op;
  o.dtype = cli.dtype;
  o.cases = cli.cases;
  o.threads = cli.threads;
  o.seed = cli.seed;
  std::map<std::string, std::array<int, 4>> tally;  // backend -> pass, fail, unsupported, skipped
  run_conformance(o, [&](const ConformanceResult& r) {
    ++tally[r.backend][size_t(r.status)];
    if (!cli.quiet || r.status == ConformanceResult::Fail) std::printf("%s\n", r.line().c_str());
    std::fflush(stdout);
  });
  int failed = 0;
  for (const auto& [b, t] : tally) {
    std::printf("%s: %d %s, %d failed, %d not supported, %d skipped\n", b.c_str(), t[0],
                o.mode == ConformanceMode::Support ? "supported" : "passed", t[1], t[2], t[3]);
    failed += t[1];
  }
  return failed ? 1 : 0;
}

}  // namespace

void add_conformance_command(CLI::App& app) {
  auto o = std::make_shared<ConformanceCli>();
  CLI::App* sub = app.add_subcommand(
      "conformance", "Every backend x op x dtype x shape against the scalar reference (like test-backend-ops)");
  sub->add_option("--mode", o->mode, "test (default), perf or support");
  sub->add_option("--backend,--backends", o->backends,
                  "backends, comma-separated (default: all). Known: " + backend_names());
  sub->add_option("--op", o->op, "only this op (e.g. MUL_MAT)");
  sub->add_option("--dtype", o->dtype, "only this dtype (e.g. q8_0)");
  sub->add_option(
      "--cases", o->cases,
      "case set: ci (default, small), full (M up to 512, K up to 8192), rocket, et (ET-SoC-1 on the emulator)");
  sub->add_option("-t,--threads", o->threads, "threads (1)");
  sub->add_option("--seed", o->seed, "seed of the random inputs");
  sub->add_flag("-q,--quiet", o->quiet, "print only failures and the tally");
  set_action(sub, [o] { return run_conformance_cmd(*o); });
}

}  // namespace opal::tools
