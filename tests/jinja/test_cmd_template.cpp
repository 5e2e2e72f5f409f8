// `opal template` through the binary: stdout must be the golden render byte for
// byte, errors must exit non-zero with a clear message.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string read_template(const fs::path& p) { return opal::test::read_file(p.string()); }

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out.push_back(c);
  }
  return out + "'";
}

struct CmdResult {
  int status;
  std::string stdout_bytes;
  std::string stderr_text;
};

// Runs `opal template ARGS`, keeping stdout and stderr apart.
CmdResult run_template(const std::string& args) {
  static int counter = 0;
  const fs::path dir = opal::test::temp_dir();
  const fs::path out = dir / ("out" + std::to_string(counter) + ".bin");
  const fs::path err = dir / ("err" + std::to_string(counter++) + ".txt");
  std::string ignored;
  const int status = opal::test::run_command("( " + quote(opal::test::opal_binary()) + " template " + args + " >" +
                                                 quote(out.string()) + " 2>" + quote(err.string()) + " )",
                                             &ignored);
  return {status, read_template(out), read_template(err)};
}

// Arguments that pass a golden case's variables on the command line.
std::string case_args(const Json& c, const fs::path& messages_file, bool with_context) {
  write_file(messages_file, c.at("messages").dump());
  std::string args = " --messages " + quote(messages_file.string()) + " --now 2024-07-26";
  if (c.at("add_generation_prompt").get<bool>()) args += " --add-generation-prompt";
  if (!c.at("tools").is_null()) args += " --var " + quote("tools=" + c.at("tools").dump());
  if (with_context)
    for (auto it = c.at("context").begin(); it != c.at("context").end(); ++it)
      args += " --var " + quote(it.key() + "=" + it.value().dump());
  return args;
}

TEST(CmdTemplate, EveryGoldenCaseThroughTheBinary) {
  const fs::path root = opal::test::shared_path("chat-templates");
  const Json index = Json::parse(read_template(root / "index.json"));
  size_t cases = 0;
  const size_t stride = opal::test::binary_sweep_stride();
  for (auto it = index.at("families").begin(); it != index.at("families").end(); ++it) {
    const std::string family = it.key();
    const fs::path tmpl = root / family / "template.jinja";
    for (const Json& c : Json::parse(read_template(root / family / "cases.json"))) {
      if (cases++ % stride != 0) continue;
      const std::string name = family + "/" + c.at("name").get<std::string>();
      const fs::path messages = fs::path(opal::test::temp_dir()) / "messages.json";
      const CmdResult r = run_template("--template " + quote(tmpl.string()) + case_args(c, messages, true));
      if (c.contains("expected_output")) {
        EXPECT_EQ(r.status, 0) << name << ": " << r.stderr_text;
        EXPECT_EQ(r.stdout_bytes, c["expected_output"].get<std::string>()) << name;
      } else {
        EXPECT_NE(r.status, 0) << name;
        EXPECT_TRUE(r.stdout_bytes.empty()) << name;
        EXPECT_NE(r.stderr_text.find("line "), std::string::npos) << name << ": " << r.stderr_text;
        if (c["expected_error"]["type"] == "TemplateError") {
          EXPECT_NE(r.stderr_text.find(c["expected_error"]["message"].get<std::string>()), std::string::npos)
              << name << ": " << r.stderr_text;
        }
      }
    }
  }
  EXPECT_EQ(cases, 123u);
}

// -m: template and bos/eos come from the GGUF (phi3-mini-gguf's cases).
TEST(CmdTemplate, ModelTemplateAndSpecialTokensFromGguf) {
  const std::string model = opal::test::shared_path("tokenizer-vectors/ggml-vocab-phi-3.gguf");
  const Json cases = Json::parse(read_template(opal::test::shared_path("chat-templates/phi3-mini-gguf/cases.json")));
  ASSERT_FALSE(cases.empty());
  for (const Json& c : cases) {
    const fs::path messages = fs::path(opal::test::temp_dir()) / "gguf_messages.json";
    const CmdResult r = run_template("-m " + quote(model) + case_args(c, messages, false));
    EXPECT_EQ(r.status, 0) << r.stderr_text;
    EXPECT_EQ(r.stdout_bytes, c.at("expected_output").get<std::string>()) << c.at("name");
    EXPECT_TRUE(r.stderr_text.empty()) << r.stderr_text;
  }
}

TEST(CmdTemplate, ModelWithoutTemplateUsesChatMLAndSaysSo) {
  const std::string model = opal::test::shared_path("models/stories260K.gguf");
  const fs::path messages = fs::path(opal::test::temp_dir()) / "chatml.json";
  write_file(messages, R"([{"role": "user", "content": "Hi"}])");
  const CmdResult r =
      run_template("-m " + quote(model) + " --messages " + quote(messages.string()) + " --add-generation-prompt");
  EXPECT_EQ(r.status, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_bytes, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(r.stderr_text.find("ChatML"), std::string::npos) << r.stderr_text;
}

TEST(CmdTemplate, BadInputFailsWithAClearMessage) {
  const fs::path dir = opal::test::temp_dir();
  const fs::path tmpl = dir / "t.jinja";
  write_file(tmpl, "{{ messages[0]['content'] }}{{ extra }}");
  const fs::path good = dir / "good.json";
  write_file(good, R"([{"role": "user", "content": "Hi"}])");
  const fs::path bad = dir / "bad.json";
  write_file(bad, R"([{"role": "user", "content": "Hi"})");

  CmdResult r = run_template("--template " + quote(tmpl.string()) + " --messages " + quote(good.string()) +
                             " --var 'extra=\"!\"'");
  EXPECT_EQ(r.status, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_bytes, "Hi!");

  r = run_template("--template " + quote(tmpl.string()) + " --messages " + quote(bad.string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.stderr_text.find("--messages"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("invalid JSON"), std::string::npos) << r.stderr_text;

  r = run_template("--template " + quote(tmpl.string()) + " --messages " + quote(good.string()) +
                   " --var extra=notjson");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.stderr_text.find("--var extra"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("invalid JSON"), std::string::npos) << r.stderr_text;

  r = run_template("--template " + quote(tmpl.string()) + " --messages " + quote(good.string()) + " --var novalue");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.stderr_text.find("NAME=JSON"), std::string::npos) << r.stderr_text;

  r = run_template("--messages " + quote(good.string()));
  EXPECT_NE(r.status, 0);

  const fs::path broken = dir / "broken.jinja";
  write_file(broken, "ok\n{% if %}");
  r = run_template("--template " + quote(broken.string()) + " --messages " + quote(good.string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.stderr_text.find("line 2, column"), std::string::npos) << r.stderr_text;
}

}  // namespace
