// The shared CLI option groups (tools/context_options.h, sampling_options.h):
// every subcommand that runs a model spells the context flags the same way
// with the same help text, and a bad value fails the same way everywhere.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace opal {
namespace {

std::string run(const std::string& args, int* status = nullptr) {
  std::string out;
  const int rc = test::run_command(test::opal_binary() + " " + args, &out);
  if (status) *status = rc;
  return out;
}

TEST(CliOptions, ContextFlagsHaveOneHelpText) {
  for (const char* cmd : {"run", "chat", "perplexity", "serve", "bench", "logits"}) {
    int rc = 0;
    const std::string help = run(std::string(cmd) + " --help 2>&1", &rc);
    ASSERT_EQ(rc, 0) << cmd << ": " << help;
    EXPECT_NE(help.find("--ctk,--cache-type-k TEXT   KV cache type: f16, bf16 or f32 (default f16; llama.cpp: -ctk)"),
              std::string::npos)
        << cmd << ": " << help;
    EXPECT_NE(help.find("compute threads"), std::string::npos) << cmd;
    EXPECT_NE(help.find("--backend"), std::string::npos) << cmd;
    EXPECT_NE(help.find("--perf-log"), std::string::npos) << cmd;
    if (std::string(cmd) != "logits")
      EXPECT_NE(help.find("logical batch size: most tokens one decode call takes"), std::string::npos) << cmd;
  }
  for (const char* cmd : {"run", "chat"}) {
    const std::string help = run(std::string(cmd) + " --help 2>&1");
    for (const char* flag : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty",
                             "--frequency-penalty", "-s,--seed"})
      EXPECT_NE(help.find(flag), std::string::npos) << cmd << " lacks " << flag;
  }
}

TEST(CliOptions, BadCacheTypeIsTheSameErrorEverywhere) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  const std::string out_prefix = test::temp_dir() + "/x";
  for (const std::string args :
       {"run -m " + model + " -p x", "chat -m " + model + " --single-turn -p x",
        "perplexity -m " + model + " -f /dev/null", "logits -m " + model + " --tokens 1 --out " + out_prefix}) {
    int rc = 0;
    const std::string out = run(args + " -ctk q9 2>&1", &rc);
    EXPECT_EQ(rc, 1) << args << ": " << out;
    EXPECT_NE(out.find("-ctk must be f16, bf16 or f32, got 'q9'"), std::string::npos) << args << ": " << out;
  }
}

}  // namespace
}  // namespace opal
