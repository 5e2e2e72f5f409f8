// The draft model's own flags on the command line (docs/speculative.md):
// -cd sizes the draft context (reported, and drafting stops past it), -td
// and -devd give the draft its own threads and devices (reported); the text
// stays that of plain decoding. Bad values and the flags without a draft
// model are refused naming the flag; an unknown --spec-type lists the known.
// -ctkd/-ctvd/-tbd, -hffd, the finer n-gram flags (--spec-ngram-mod-n-max/-n-min,
// --spec-ngram-simple-min-hits) take effect or are refused. ngram-cache: a dynamic
// lookup cache (-lcd) written by runs drafts more in the next; a corrupt one is refused naming the file.
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

// The `speculative: TYPE: N drafted, A accepted (...) in V verifications` line: N (and V), -1 if absent.
int drafted(const std::string& err, int* verifications = nullptr) {
  size_t at = err.find("speculative: ");
  int n = -1, v = -1;
  if (at != std::string::npos) at = err.find(": ", at + 13);
  if (at != std::string::npos) {
    std::sscanf(err.c_str() + at, ": %d drafted", &n);
    const size_t in = err.find(" in ", at);
    if (in != std::string::npos) std::sscanf(err.c_str() + in, " in %d verifications", &v);
  }
  if (verifications) *verifications = v;
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
  EXPECT_NE(full.err.find("(256 cells, K f16, V f16)"), std::string::npos) << full.err;  // the target's context
  const Result small = opal(base + " -md " + stories_model() + " --draft-p-min 0 -cd 32 -td 1 -devd none");
  ASSERT_EQ(small.rc, 0) << small.err;
  EXPECT_EQ(small.out, plain.out);
  EXPECT_NE(small.err.find("(32 cells, K f16, V f16), 1 threads, devices cpu"), std::string::npos) << small.err;
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

// -ctkd/-ctvd give the draft its own cache types, -tbd its threads (one count with -td); reported, and the
// text stays that of plain decoding.
TEST(SpecCli, DraftCacheTypesAndBatchThreadsTakeEffect) {
  const std::string base = "run -m " + stories_model() + " -p Once -n 48 --temp 0 -t 1 -c 256";
  const Result plain = opal(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  // (stories260K's heads of 8 take no quantized cache; the draft's types are the float ones.)
  const Result r = opal(base + " -md " + stories_model() + " --draft-p-min 0 -ctkd bf16 -ctvd f32 -tbd 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_NE(r.err.find("(256 cells, K bf16, V f32), 1 threads"), std::string::npos) << r.err;
  EXPECT_GT(drafted(r.err), 20) << r.err;
  const Result k = opal(base + " -md " + stories_model() + " --draft-p-min 0 -ctkd f32 -td 1 -tbd 1");
  ASSERT_EQ(k.rc, 0) << k.err;
  EXPECT_EQ(k.out, plain.out);
  EXPECT_NE(k.err.find("(256 cells, K f32, V f32), 1 threads"), std::string::npos) << k.err;
}

// --spec-ngram-mod-n-max/-n-min are ngram-mod's draft limits; --spec-ngram-simple-min-hits makes
// ngram-simple wait for a key seen that often.
TEST(SpecCli, FinerNgramFlagsTakeEffect) {
  const std::string base = "run -m " + stories_model() + " -p Once -n 64 --temp 0 -t 1 -c 256";
  const Result plain = opal(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  int v = 0;
  const Result mod = opal(base + " --spec-type ngram-mod --spec-ngram-size-n 2 --spec-ngram-mod-n-max 2");
  ASSERT_EQ(mod.rc, 0) << mod.err;
  EXPECT_EQ(mod.out, plain.out);
  const int n_mod = drafted(mod.err, &v);
  EXPECT_GT(n_mod, 0) << mod.err;
  EXPECT_LE(n_mod, 2 * v) << mod.err;  // at most 2 tokens per verification
  // A draft has room for at most 63 tokens of -n 64: none reaches -n-min 64.
  const Result mod_min = opal(base +
                              " --spec-type ngram-mod --spec-ngram-size-n 2 --spec-ngram-mod-n-min 64 "
                              "--spec-ngram-mod-n-max 64");
  ASSERT_EQ(mod_min.rc, 0) << mod_min.err;
  EXPECT_EQ(mod_min.out, plain.out);
  EXPECT_EQ(drafted(mod_min.err), 0) << mod_min.err;
  const Result one = opal(base + " --spec-type ngram-simple --spec-ngram-size-n 1 --spec-ngram-simple-min-hits 1");
  const Result many = opal(base + " --spec-type ngram-simple --spec-ngram-size-n 1 --spec-ngram-simple-min-hits 1000");
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(many.rc, 0) << many.err;
  EXPECT_EQ(one.out, plain.out);
  EXPECT_EQ(many.out, plain.out);
  EXPECT_GT(drafted(one.err), 0) << one.err;
  EXPECT_EQ(drafted(many.err), 0) << many.err;  // no token of 64 occurred 1000 times before
}

TEST(SpecCli, NewDraftFlagsRefuseBadValuesNamingTheFlag) {
  const std::string run = "run -m " + stories_model() + " -p Once -n 4 -t 1 -c 128 ";
  const std::string md = run + "-md " + stories_model() + " ";
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {md + "-ctkd q3_k", "-ctkd must be f16, bf16, f32, q8_0 or q4_0, got 'q3_k'"},
      {md + "-ctvd x", "-ctvd must be f16, bf16, f32, q8_0 or q4_0, got 'x'"},
      {md + "-tbd 2 -td 1", "-tbd 2 differs from -td 1"},
      {md + "-tbd -1", "tbd"},
      {run + "--spec-type ngram-simple -ctkd q8_0", "-ctkd sets up the draft model"},
      {run + "-ctvd q8_0", "-ctvd sets up the draft model"},
      {run + "-tbd 1", "-tbd sets up the draft model"},
      {run + "-hffd x.gguf", "-hffd names a file of the repository -hfd names"},
      {run + "--spec-type ngram-simple --spec-ngram-mod-n-max 4",
       "--spec-ngram-mod-n-max applies to --spec-type ngram-mod"},
      {run + "--spec-type ngram-mod --spec-ngram-mod-n-max 0", "--spec-ngram-mod-n-max must be in [1, 1024], got 0"},
      {run + "--spec-type ngram-mod --spec-ngram-mod-n-min -3", "--spec-ngram-mod-n-min must be"},
      {run + "--spec-type ngram-simple --spec-ngram-simple-min-hits 0", "--spec-ngram-min-hits must be in"},
      {run + "--spec-type ngram-simple -lcs cache.bin", "-lcs is a lookup cache for --spec-type ngram-cache"},
      {run + "-md " + stories_model() + " --lookup-cache-dynamic c.bin", "-lcd is a lookup cache for --spec-type"},
      {run + "-lcs no_such_cache.bin", "lookup cache 'no_such_cache.bin': cannot open"},
      {"serve -m " + stories_model() + " --port 0 -md " + stories_model() + " -ctkd f8", "-ctkd must be"},
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

TEST(SpecCli, NgramCacheWritesItsDynamicFileAndLaterRunsDraftMore) {
  const std::string base = "run -m " + stories_model() + " -p Once -n 64 --temp 0 -t 1 -c 256";
  const std::string lcd = test::temp_dir() + "/spec_cli_lcd.bin";
  std::remove(lcd.c_str());
  const Result plain = opal(base);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  const Result first = opal(base + " -lcd " + lcd);  // implies --spec-type ngram-cache
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(first.out, plain.out);
  EXPECT_NE(first.err.find("speculative: ngram-cache: "), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("lookup cache: wrote "), std::string::npos) << first.err;
  // The dynamic cache's strict thresholds want an n-gram seen twice: after two runs the third drafts the text.
  const Result second = opal(base + " --spec-type ngram-cache -lcd " + lcd);
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_EQ(second.out, plain.out);
  const Result third = opal(base + " -lcd " + lcd);
  ASSERT_EQ(third.rc, 0) << third.err;
  EXPECT_EQ(third.out, plain.out);
  EXPECT_GT(drafted(third.err), drafted(first.err) + 20) << first.err << third.err;
  int n = 0, accepted = 0;
  const size_t at = third.err.find("speculative: ngram-cache: ");
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(std::sscanf(third.err.c_str() + at, "speculative: ngram-cache: %d drafted, %d accepted", &n, &accepted), 2);
  EXPECT_GT(accepted, n / 2) << third.err;
  // A static cache in the same format is read too; a truncated file is refused naming it.
  const Result with_static = opal(base + " --spec-type ngram-cache -lcs " + lcd);
  ASSERT_EQ(with_static.rc, 0) << with_static.err;
  EXPECT_EQ(with_static.out, plain.out);
  std::string bytes = test::read_file(lcd);
  ASSERT_GT(bytes.size(), 8u);
  const std::string cut = test::temp_dir() + "/spec_cli_lcd_cut.bin";
  {
    std::FILE* f = std::fopen(cut.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size() - 6, f);
    std::fclose(f);
  }
  const Result bad = opal(base + " -lcd " + cut);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("lookup cache '" + cut + "': truncated"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace opal
