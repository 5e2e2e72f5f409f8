// The op support matrix (`opal ops`, docs/ops.md): contents per backend and
// docs/ops.md being current.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "backends/factory/backend_factory.h"
#include "backends/factory/support_matrix.h"
#include "core/error.h"
#include "support/test_support.h"

namespace opal {
namespace {

const SupportCell* cell(const SupportMatrix& m, const std::string& b, const std::string& op, const std::string& dt) {
  for (const SupportCell& c : m.cells)
    if (c.backend == b && c.op == op && c.dtype == dt) return &c;
  return nullptr;
}

TEST(SupportMatrix, TestAccelRunsMulMatQ8_0AndF16AndDeclinesTheRestWithReasons) {
  const SupportMatrix m = support_matrix({"cpu", "test-accel"});
  ASSERT_EQ(m.backends.size(), 2u);
  const SupportCell* q8 = cell(m, "test-accel", "MUL_MAT", "q8_0");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->state, SupportCell::Yes);
  EXPECT_EQ(cell(m, "test-accel", "MUL_MAT", "f16")->state, SupportCell::Yes);
  const SupportCell* q4 = cell(m, "test-accel", "MUL_MAT", "q4_0");
  ASSERT_NE(q4, nullptr);
  EXPECT_EQ(q4->state, SupportCell::No);
  EXPECT_NE(q4->reason.find("q4_0"), std::string::npos) << q4->reason;
  const SupportCell* norm = cell(m, "test-accel", "RMS_NORM", "f32");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->state, SupportCell::No);
  EXPECT_NE(norm->reason.find("runs only MUL_MAT"), std::string::npos) << norm->reason;
  int accel_yes = 0;
  for (const SupportCell& c : m.cells)
    if (c.backend == "test-accel" && c.state == SupportCell::Yes) {
      ++accel_yes;
      EXPECT_EQ(c.op, "MUL_MAT");
    }
  EXPECT_EQ(accel_yes, 2);
}

TEST(SupportMatrix, CpuRunsEveryMatmulWeightTypeAndEveryF32Op) {
  const SupportMatrix m = support_matrix({"cpu"});
  for (const SupportCell& c : m.cells) {
    if (c.op == "MUL_MAT" || c.op == "GET_ROWS") {
      EXPECT_EQ(c.state, SupportCell::Yes) << c.op << " " << c.dtype << ": " << c.reason;
    }
    if (c.dtype == "f32" && c.state != SupportCell::NotApplicable) {
      EXPECT_EQ(c.state, SupportCell::Yes) << c.op << ": " << c.reason;
    }
    if (c.state == SupportCell::No) {
      EXPECT_FALSE(c.reason.empty()) << c.op << " " << c.dtype;
    }
  }
  // a q8_0 KV cache is stored on the CPU, and read by the tiled (flash)
  // attention only: the probe (materialized attention) is declined with a reason
  const SupportCell* kv = cell(m, "cpu", "KV_STORE", "q8_0");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->state, SupportCell::Yes) << kv->reason;
  const SupportCell* attn = cell(m, "cpu", "ATTENTION", "q8_0");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->state, SupportCell::No);
  EXPECT_NE(attn->reason.find("flash"), std::string::npos) << attn->reason;
}

TEST(SupportMatrix, CsvHasOneRowPerCell) {
  const SupportMatrix m = support_matrix({});
  const std::string csv = m.csv();
  size_t lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_EQ(lines, m.cells.size() + 1);
  EXPECT_EQ(csv.rfind("backend,op,dtype,supported,reason\n", 0), 0u);
}

TEST(SupportMatrix, UnknownBackendIsAnError) {
  EXPECT_THROW(support_matrix({"no-such-backend"}), Error);
  EXPECT_THROW(parse_backend_list("cpu,,test-accel"), Error);
  EXPECT_THROW(parse_backend_list("cpu,cpu"), Error);
  EXPECT_EQ(parse_backend_list("test-accel,cpu").size(), 2u);
  EXPECT_TRUE(parse_backend_list("").empty());
}

TEST(SupportMatrix, DocsOpsMdIsCurrent) {
  std::ifstream f(test::source_dir() + "/docs/ops.md");
  ASSERT_TRUE(f) << "docs/ops.md is missing: run scripts/gen_ops_md.sh";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), support_matrix({}).markdown()) << "docs/ops.md is stale: run scripts/gen_ops_md.sh";
}

TEST(SupportMatrix, OpalOpsPrintsTheMatrix) {
  std::string out;
  const std::string path = test::temp_dir() + "/ops.md";
  ASSERT_EQ(test::run_command("(" + test::opal_binary() + " ops -o md > " + path + " 2>/dev/null)", &out), 0) << out;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), support_matrix({}).markdown());
  ASSERT_NE(test::run_command(test::opal_binary() + " ops --backend nope 2>&1", &out), 0);
  EXPECT_NE(out.find("unknown backend 'nope'"), std::string::npos) << out;
}

}  // namespace
}  // namespace opal
