// Structured output end to end: the real `opal serve` binary driven by the
// official `openai` npm client (tests/server/node/structured_output.mjs):
// many JSON Schemas x seeds, every output validated with Ajv.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

TEST(ServeStructuredOutput, SchemasValidateWithOpenAiClientAndAjv) {
  const std::string dir = source_dir() + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/ajv/package.json"))
      << dir << "/node_modules/ajv is missing: run scripts/setup.sh (it runs `npm ci` there)";
  std::string version;
  ASSERT_EQ(run_command("node --version", &version), 0) << "node is not installed (scripts/setup.sh installs it)";
  ServeProcess p("-m " + stories_model() + " --np 2 -a stories --api-key test-key");
  ASSERT_TRUE(p.ready());
  std::string out;
  const int rc = run_command("cd " + dir + " && OPAL_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                                 "/v1 OPAL_API_KEY=test-key OPAL_MODEL=stories timeout 300 node structured_output.mjs",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

}  // namespace
}  // namespace opal::test
