// Every case of every family in shared/chat-templates: the render must be
// byte-identical to Python jinja2's expected_output, or fail where the case
// expects an error (raise_exception cases: with the template's own message).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "support/test_support.h"
#include "tokenizer/jinja/chat.h"

namespace {

using Json = nlohmann::ordered_json;

std::string slurp(const std::filesystem::path& p) { return opal::test::read_file(p.string()); }

// The README's FIXED_NOW: 2024-07-26 00:00:00, naive local time.
opal::jinja::RenderOptions fixed_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_isdst = -1;
  opal::jinja::RenderOptions o;
  o.now = std::mktime(&tm);
  return o;
}

struct CaseResult {
  bool ok = false;
  std::string detail;
};

CaseResult run_case(const std::string& source, const Json& c) {
  Json extra = c.at("context");
  extra["tools"] = c.at("tools");
  std::string out;
  try {
    out = opal::jinja::apply_chat_template(source, c.at("messages"), c.at("add_generation_prompt").get<bool>(), extra,
                                           fixed_now());
  } catch (const opal::jinja::TemplateError& e) {
    if (!c.contains("expected_error")) return {false, std::string("unexpected error: ") + e.what()};
    const Json& want = c["expected_error"];
    if (want.at("type") == "TemplateError") {
      if (!e.raised_by_template()) return {false, std::string("expected raise_exception, got: ") + e.what()};
      if (e.message() != want.at("message").get<std::string>())
        return {false, "raise_exception message differs: got '" + e.message() + "'"};
    }
    return {true, ""};
  }
  if (c.contains("expected_error")) return {false, "expected an error, got render " + Json(out).dump()};
  const std::string want = c.at("expected_output").get<std::string>();
  if (out != want)
    return {false, "render differs\n  expected: " + Json(want).dump() + "\n  got:      " + Json(out).dump()};
  return {true, ""};
}

TEST(ChatTemplates, EveryGoldenCaseOfEveryFamily) {
  const std::filesystem::path root = opal::test::shared_path("chat-templates");
  const Json index = Json::parse(slurp(root / "index.json"));
  size_t families = 0, cases = 0, passed = 0, error_cases = 0;
  for (auto it = index.at("families").begin(); it != index.at("families").end(); ++it) {
    const std::string family = it.key();
    SCOPED_TRACE(family);
    const std::string source = slurp(root / family / "template.jinja");
    ASSERT_FALSE(source.empty()) << family;
    const Json list = Json::parse(slurp(root / family / "cases.json"));
    EXPECT_EQ(list.size(), it.value().at("shared_cases").get<size_t>()) << family;
    size_t family_passed = 0;
    for (const Json& c : list) {
      const CaseResult r = run_case(source, c);
      EXPECT_TRUE(r.ok) << family << "/" << c.at("name").get<std::string>() << ": " << r.detail;
      family_passed += r.ok;
      error_cases += c.contains("expected_error");
    }
    std::cout << "[ family   ] " << family << ": " << family_passed << "/" << list.size() << " cases pass\n";
    ++families;
    cases += list.size();
    passed += family_passed;
  }
  std::cout << "[ total    ] " << passed << "/" << cases << " cases in " << families << " families\n";
  EXPECT_EQ(families, 14u);
  EXPECT_EQ(cases, 123u);
  EXPECT_EQ(error_cases, 7u);
}

// The phi3-mini-gguf family's template is the one stored in the shared GGUF.
TEST(ChatTemplates, GgufTemplateMatchesFamilyTemplate) {
  const std::string gguf_path = opal::test::shared_path("tokenizer-vectors/ggml-vocab-phi-3.gguf");
  auto f = opal::gguf::File::open(gguf_path);
  const auto t = opal::jinja::chat_template_from_gguf(f);
  EXPECT_FALSE(t.is_fallback);
  EXPECT_EQ(t.source, slurp(opal::test::shared_path("chat-templates/phi3-mini-gguf/template.jinja")));
  const auto tokens = opal::jinja::special_tokens_from_gguf(f);
  ASSERT_TRUE(tokens.bos && tokens.eos);
  EXPECT_EQ(*tokens.bos, "<s>");
  EXPECT_EQ(*tokens.eos, "<|endoftext|>");
}

TEST(ChatTemplates, ModelWithoutTemplateFallsBackToChatML) {
  auto f = opal::gguf::File::open(opal::test::shared_path("models/stories260K.gguf"));
  const auto t = opal::jinja::chat_template_from_gguf(f);
  EXPECT_TRUE(t.is_fallback);
  EXPECT_EQ(t.source, opal::jinja::chatml_template());
  const Json messages = Json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"Hi"}])");
  EXPECT_EQ(opal::jinja::apply_chat_template(t.source, messages, true, Json::object()),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THROW(opal::jinja::chat_template_from_gguf(f, "tool_use"), opal::Error);
}

}  // namespace
