// --lm / --no-mmap / --mlock on the subcommands that load a model
// (tools/load_options.h): every load mode gives the same greedy text, and a
// bad mode is a clear error.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace opal {
namespace {

std::string run_opal(const std::string& args, int* status) {
  std::string out;
  *status = test::run_command(test::opal_binary() + " " + args, &out);
  return out;
}

std::string text_of(const std::string& out) { return out.substr(0, out.find("prompt:")); }

TEST(LoadOptions, EveryModeGivesTheSameGreedyText) {
  const std::string base =
      "run -m " + test::shared_path("models/stories260K.gguf") + " -p 'Once upon a time' -n 12 --temp 0 -t 1";
  int rc = 0;
  const std::string ref = run_opal(base + " 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0) << ref;
  for (const char* flags :
       {"--lm mmap", "--lm populate", "--lm read", "--lm none", "--lm huge", "--no-mmap", "-lm read"}) {
    SCOPED_TRACE(flags);
    const std::string out = run_opal(base + " " + flags + " 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(text_of(out), text_of(ref));
  }
}

TEST(LoadOptions, UnknownModeNamesTheFlagAndTheChoices) {
  int rc = 0;
  const std::string out =
      run_opal("run -m " + test::shared_path("models/stories260K.gguf") + " -p x -n 1 --lm fast 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--lm"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown load mode 'fast'"), std::string::npos) << out;
  EXPECT_NE(out.find("mmap"), std::string::npos) << out;
}

TEST(LoadOptions, PerplexityAndLogitsAcceptThem) {
  int rc = 0;
  const std::string story = test::shared_path("golden/story.txt");
  const std::string out = run_opal(
      "perplexity -m " + test::shared_path("models/stories260K.gguf") + " -f " + story + " -c 128 --no-mmap -t 1 2>&1",
      &rc);
  EXPECT_EQ(rc, 0) << out;
  const std::string out2 = run_opal("logits -m " + test::shared_path("models/stories260K.gguf") +
                                        " --tokens 1,2,3 --lm read --out " + test::temp_dir() + "/lo 2>&1",
                                    &rc);
  EXPECT_EQ(rc, 0) << out2;
}

}  // namespace
}  // namespace opal
