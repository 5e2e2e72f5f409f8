// The committed corpus of hand-made corrupt GGUF files (tests/data/corrupt,
// written by scripts/make_corrupt_corpus.py): each must be rejected with an
// opal::Error naming the byte offset, the class of problem and the key or
// tensor concerned.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "support/test_support.h"

using namespace opal;

namespace {

struct Case {
  std::string file, fragment, name;
};

std::string corpus_dir() { return test::source_dir() + "/tests/data/corrupt"; }

std::vector<Case> expected_cases() {
  std::ifstream in(corpus_dir() + "/EXPECTED.tsv");
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    Case c;
    std::getline(ls, c.file, '\t');
    std::getline(ls, c.fragment, '\t');
    std::getline(ls, c.name, '\t');
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST(GgufCorrupt, BaseFileIsValid) {
  const auto f = gguf::File::open(corpus_dir() + "/base.gguf");
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array.size(), 4u);
  EXPECT_EQ(f.find_tensor("q")->type, DType::Q8_0);
}

TEST(GgufCorrupt, EveryFileGivesAClearError) {
  const auto cases = expected_cases();
  ASSERT_GE(cases.size(), 35u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::string msg;
    try {
      gguf::File::open(corpus_dir() + "/" + c.file);
      ADD_FAILURE() << "accepted";
      continue;
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.file), std::string::npos) << "the path is named: " << msg;
    if (!c.name.empty()) {
      EXPECT_NE(msg.find("'" + c.name + "'"), std::string::npos) << msg;
    }
    EXPECT_LT(msg.size(), 400u) << msg;
  }
}

TEST(GgufCorrupt, EveryFileIsListed) {
  std::set<std::string> listed;
  for (const auto& c : expected_cases()) listed.insert(c.file);
  for (const auto& e : std::filesystem::directory_iterator(corpus_dir())) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".gguf" && name != "base.gguf") {
      EXPECT_TRUE(listed.count(name)) << name;
    }
  }
}

TEST(GgufCorrupt, ScriptReproducesTheCommittedFiles) {
  const std::string out = test::temp_dir() + "/corrupt";
  std::string log;
  ASSERT_EQ(test::run_command("python3 " + test::source_dir() + "/scripts/make_corrupt_corpus.py " + out, &log), 0)
      << log;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    SCOPED_TRACE(e.path().filename().string());
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(test::read_bytes(e.path().string()) == test::read_bytes(corpus_dir() + "/" + name));
    ++n;
  }
  EXPECT_GE(n, 37);
}

TEST(GgufCorrupt, EveryTruncationOfTheBaseFileIsAnError) {
  const auto base = test::read_bytes(corpus_dir() + "/base.gguf");
  for (size_t cut = 0; cut < base.size(); ++cut) {
    // The last tensor's padding is not part of its data: cuts inside it still parse.
    if (cut >= base.size() - 30) break;
    std::span<const uint8_t> part(base.data(), cut);
    try {
      gguf::File::parse(part, "cut");
      ADD_FAILURE() << "no error at cut " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
    }
  }
}
