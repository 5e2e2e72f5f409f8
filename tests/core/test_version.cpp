// The build's identity (core/version.h): cmake/git_version.cmake, which the
// opal_version target runs at every build, writes the checkout's current commit
// (with -dirty for changed tracked files), so a binary never names the commit
// it was configured at when it was built from a later one.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "core/version.h"
#include "support/test_support.h"

using namespace opal;

namespace {

std::string version_head_commit(const std::string& repo) {
  std::string out;
  if (test::run_command("git -C '" + repo + "' rev-parse --short HEAD 2>/dev/null", &out) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string version_generate(const std::string& repo, std::string* log) {
  const std::string out = test::temp_dir() + "/version.cpp";
  const std::string cmd = "cmake -DSRC='" + repo + "' -DIN='" + test::source_dir() + "/core/version.cpp.in' -DOUT='" +
                          out + "' -P '" + test::source_dir() + "/cmake/git_version.cmake' 2>&1";
  if (test::run_command(cmd, log) != 0) return "";
  return test::read_file(out);
}

}  // namespace

TEST(Version, CommitIsAShortHashOrUnknown) {
  const std::string commit = git_commit();
  EXPECT_TRUE(std::regex_match(commit, std::regex("[0-9a-f]{7,40}(-dirty)?|unknown"))) << commit;
}

TEST(Version, GeneratedAtBuildTimeFromTheCheckoutsHead) {
  const std::string head = version_head_commit(test::source_dir());
  if (head.empty()) GTEST_SKIP() << test::source_dir() << " is not a git checkout (or git is absent)";
  std::string log;
  const std::string text = version_generate(test::source_dir(), &log);
  ASSERT_FALSE(text.empty()) << log;
  EXPECT_NE(text.find("return \"" + head), std::string::npos) << "HEAD " << head << " not in:\n" << text;
}

TEST(Version, UnknownOutsideAGitCheckout) {
  const std::string dir = test::temp_dir();
  if (!version_head_commit(dir).empty()) GTEST_SKIP() << dir << " lies inside a git checkout";
  std::string log;
  const std::string text = version_generate(dir, &log);
  ASSERT_FALSE(text.empty()) << log;
  EXPECT_NE(text.find("return \"unknown\""), std::string::npos) << text;
}
