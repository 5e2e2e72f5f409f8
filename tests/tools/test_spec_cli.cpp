// The draft model's own flags on the command line (docs/speculative.md):
// -cd sizes the draft context (reported, and drafting stops past it), -td
// and -devd give the draft its own threads and devices (reported); the text
// stays that of plain decoding. Bad values and the flags without a draft
// model are refused naming the flag; an unknown --spec-type lists the known.
#include <gtest/gtest.h>

#include <cstdio>

#include "support/test_support.h"

namespace opal {
namespace {

std::string stories_model() { return test::shared_path("models/stories260K.gguf"); }

struct Result {
  int rc = 0;
  std::string out, err;
};

// `opal ARGS` with stdout and stderr apart.
Result opal(const std::string& args) {
  static int n = 0;
  const std::string err = test::temp_dir() + "/spec_cli_err_" + std::to_string(n++) + ".txt";
  Result r;
  std::string cmd = "(";  // built in steps: GCC 12 warns (-Wrestrict) on "literal" + std::string here
  cmd += test::opal_binary();
  cmd += ' ';
  cmd += args;
  cmd += " 2>";
  cmd += err;
  cmd += ')';
  r.rc = test::run_command(cmd, &r.out);
  r.err = test::read_file(err);
  return r;
}

int drafted(const std::string& err) {
  const size_t at = err.find("speculative: draft: ");
  int n = -1;
  if (at != std::string::npos) std::sscanf(err.c_str() + at, "speculative: draft: %d drafted", &n);
  return n;
}

TEST(SpecCli, DraftContextThreadsAndDevicesTakeEffect) {
  const std::string base = "run -m " + stories_model() + " -p Once -n 64 --temp 0 -t 1 -c 256";
  const Result plain = opal(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  const Result full = opal(base + " -md " + stories_model() + " --draft-p-min 0");
  ASSERT_EQ(full.rc, 0) << full.err;
  EXPECT_EQ(full.out, plain.out);
  EXPECT_NE(full.err.find("opal: draft model: "), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("(256 cells)"), std::string::npos) << full.err;  // the target's context
  const Result small = opal(base + " -md " + stories_model() + " --draft-p-min 0 -cd 32 -td 1 -devd none");
  ASSERT_EQ(small.rc, 0) << small.err;
  EXPECT_EQ(small.out, plain.out);
  EXPECT_NE(small.err.find("(32 cells), 1 threads, devices cpu"), std::string::npos) << small.err;
  // Drafts sit below position 32 of the draft context: fewer than without -cd, but some.
  EXPECT_GT(drafted(full.err), 40) << full.err;
  EXPECT_GT(drafted(small.err), 0) << small.err;
  EXPECT_LT(drafted(small.err), 32) << small.err;
}

TEST(SpecCli, BadDraftFlagsAreRefusedNamingTheFlag) {
  const std::string run = "run -m " + stories_model() + " -p Once -n 4 -t 1 -c 128 ";
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {run + "-cd 64", "-cd sets up the draft model"},
      {run + "--spec-type ngram-simple -td 1", "-td sets up the draft model"},
      {run + "-devd none", "-devd sets up the draft model"},
      {run + "-md " + stories_model() + " -cd -5", "cd"},
      {run + "-md " + stories_model() + " -td -1", "td"},
      {run + "-md " + stories_model() + " -devd bogus", "-devd 'bogus'"},
      {run + "--spec-type eagle", "ngram-map-k4v"},
      {run + "--spec-type ngram-mod --spec-ngram-min-hits 0", "--spec-ngram-min-hits"},
      {"chat -m " + stories_model() + " --single-turn -p x -cd 8", "-cd sets up the draft model"},
      {"bench-spec -m " + stories_model() + " --spec-type ngram-simple -devd none", "-devd sets up the draft model"},
      {"serve -m " + stories_model() + " --port 0 --spec-type ngram-mod -td 2", "-td sets up the draft model"},
  };
  for (const Case& c : cases) {
    const Result r = opal(c.args);
    EXPECT_NE(r.rc, 0) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(SpecCli, NgramModesRunFromTheCommandLine) {
  const std::string base = "run -m " + stories_model() + " -p Once -n 48 --temp 0 -t 1 -c 256";
  const Result plain = opal(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  for (const char* type : {"ngram-map-k", "ngram-map-k4v", "ngram-mod"}) {
    const Result r = opal(base + " --spec-type " + type + " --spec-ngram-size-n 2 --spec-ngram-min-hits 1");
    ASSERT_EQ(r.rc, 0) << type << "\n" << r.err;
    EXPECT_EQ(r.out, plain.out) << type;
    EXPECT_NE(r.err.find(std::string("speculative: ") + type + ": "), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace opal
