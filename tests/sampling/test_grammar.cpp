// Grammar engine: GBNF parsing (accept/reject strings), errors naming the
// problem, token masks over a small vocabulary (multi-byte and partial UTF-8
// tokens, end of generation), and JSON Schema -> GBNF conversion.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"

namespace opal {
namespace {

bool matches(const std::string& gbnf, const std::string& text) { return grammar_matches(Grammar::parse(gbnf), text); }

std::string error_of(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Grammar, LiteralsAlternationGrouping) {
  const std::string g = "root ::= \"ab\" (\"c\" | \"de\") # comment\n";
  EXPECT_TRUE(matches(g, "abc"));
  EXPECT_TRUE(matches(g, "abde"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_FALSE(matches(g, "abd"));
  EXPECT_FALSE(matches(g, "abcd"));
}

TEST(Grammar, Repetitions) {
  EXPECT_TRUE(matches("root ::= \"a\"*", ""));
  EXPECT_TRUE(matches("root ::= \"a\"*", "aaaa"));
  EXPECT_FALSE(matches("root ::= \"a\"+", ""));
  EXPECT_TRUE(matches("root ::= \"a\"+ \"b\"?", "aab"));
  EXPECT_FALSE(matches("root ::= \"a\"+ \"b\"?", "aabb"));
  const std::string g = "root ::= [0-9]{2,4}";
  EXPECT_FALSE(matches(g, "1"));
  EXPECT_TRUE(matches(g, "12"));
  EXPECT_TRUE(matches(g, "1234"));
  EXPECT_FALSE(matches(g, "12345"));
  EXPECT_TRUE(matches("root ::= (\"ab\"){3}", "ababab"));
  EXPECT_FALSE(matches("root ::= (\"ab\"){3}", "abab"));
  EXPECT_TRUE(matches("root ::= \"x\"{2,}", "xxxxx"));
  EXPECT_FALSE(matches("root ::= \"x\"{2,}", "x"));
  EXPECT_TRUE(matches("root ::= \"ab\"*", "abab"));
  EXPECT_FALSE(matches("root ::= \"ab\"*", "aba"));
}

TEST(Grammar, CharClassesAndEscapes) {
  const std::string g = "root ::= [a-cx] [^0-9\\n] \"\\x41\\u00e9\\\"\" .";
  EXPECT_TRUE(matches(g, "bZAé\"€"));
  EXPECT_TRUE(matches(g, "x-Aé\"z"));
  EXPECT_FALSE(matches(g, "d-Aé\"z"));
  EXPECT_FALSE(matches(g, "a5Aé\"z"));
  EXPECT_FALSE(matches(g, "a\nAé\"z"));
  EXPECT_TRUE(matches("root ::= [\\]\\[]", "]"));
  EXPECT_TRUE(matches("root ::= [é-ë]+", "éêë"));
  EXPECT_FALSE(matches("root ::= [é-ë]+", "ì"));
}

TEST(Grammar, MultiLineRulesAndReferences) {
  const std::string g =
      "root ::=\n"
      "  item (\",\" item)*\n"
      "item ::= ( \"a\"\n"
      "  | \"b\" )\n"
      "  # trailing comment\n";
  EXPECT_TRUE(matches(g, "a,b,a"));
  EXPECT_FALSE(matches(g, "a,,b"));
  // Right recursion works; nesting works.
  const std::string paren = "root ::= \"(\" root \")\" | \"\"";
  EXPECT_TRUE(matches(paren, "((()))"));
  EXPECT_FALSE(matches(paren, "(()"));
}

TEST(Grammar, ErrorsNameTheProblem) {
  EXPECT_NE(error_of("root ::= foo").find("rule 'foo' is used"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"*)*").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("a ::= \"x\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("max < min"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\n\nx ::= (\"b\"").find("line 3"), std::string::npos);
}

// A vocabulary with multi-byte tokens, a token split inside "é" (0xC3 0xA9),
// an empty control token and an end-of-generation token.
struct TinyVocab {
  std::vector<std::string> pieces{"{",    "}",        "\"", "a",     "ab", "abc", "1",   "12", "\xC3",
                                  "\xA9", "\xC3\xA9", "",   "<eos>", " ",  "{\"", "\"}", "x"};
  int32_t eos = 12;
  std::shared_ptr<GrammarVocab> vocab() const {
    return std::make_shared<GrammarVocab>(pieces, std::vector<int32_t>{eos});
  }
};

std::vector<int32_t> allowed_ids(GrammarState& st) {
  std::vector<uint8_t> mask;
  st.allowed(mask);
  std::vector<int32_t> out;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

TEST(GrammarMask, AllowsExactlyTheContinuations) {
  TinyVocab tv;
  auto g = Grammar::parse("root ::= \"{\" \"\\\"\" [a-c]+ \"\\\"\" \"}\"");
  GrammarState st(g, tv.vocab());
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{0, 14}));  // "{" and "{\""
  st.accept(14);
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{3, 4, 5}));  // a, ab, abc (not the quote yet)
  st.accept(5);
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{2, 3, 4, 5, 15}));
  EXPECT_FALSE(st.can_end());
  st.accept(15);
  EXPECT_TRUE(st.can_end());
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{12}));  // only end of generation
  EXPECT_THROW(st.accept(3), Error);
}

TEST(GrammarMask, PartialUtf8Tokens) {
  TinyVocab tv;
  auto g = Grammar::parse("root ::= \"é\"+");
  GrammarState st(g, tv.vocab());
  // The lead byte alone is possible; the lone continuation byte is not.
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{8, 10}));
  st.accept(8);
  EXPECT_FALSE(st.can_end());
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{9}));
  st.accept(9);
  EXPECT_TRUE(st.can_end());
  EXPECT_EQ(allowed_ids(st), (std::vector<int32_t>{8, 10, 12}));
  // Overlong forms (0xC1 0xA9 would be 'i'), surrogates and lone continuation
  // bytes never match.
  auto gi = Grammar::parse("root ::= [a-z]+");
  EXPECT_FALSE(grammar_matches(gi, "\xC1\xA9"));
  EXPECT_FALSE(grammar_matches(gi, "\xE0\x81\xBB"));
  EXPECT_FALSE(grammar_matches(Grammar::parse("root ::= ."), "\xED\xA0\x80"));
  EXPECT_FALSE(grammar_matches(Grammar::parse("root ::= ."), "\xF5\x80\x80\x80"));
  EXPECT_TRUE(grammar_matches(Grammar::parse("root ::= ."), "\xF0\x9F\x98\x80"));
  // A class that excludes é refuses its lead byte.
  GrammarState st2(Grammar::parse("root ::= [^é]"), tv.vocab());
  const auto ids = allowed_ids(st2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 10), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 11), 0);  // the empty control token, never
}

TEST(GrammarMask, AllowsMatchesMaskAndCacheIsStable) {
  TinyVocab tv;
  auto g = Grammar::parse("root ::= (\"a\" | \"b\" | \"1\")* \"x\"");
  GrammarState st(g, tv.vocab());
  for (int step = 0; step < 3; ++step) {
    std::vector<uint8_t> mask;
    st.allowed(mask);
    for (int32_t t = 0; t < static_cast<int32_t>(tv.pieces.size()); ++t) EXPECT_EQ(st.allows(t), mask[t] != 0) << t;
    st.accept(step == 2 ? 16 : 4);
  }
  EXPECT_TRUE(st.finished());
}

TEST(GrammarMask, DeadEndGivesEmptyMask) {
  TinyVocab tv;
  GrammarState st(Grammar::parse("root ::= \"q\""), tv.vocab());  // no token starts with q
  std::vector<uint8_t> mask;
  EXPECT_EQ(st.allowed(mask), 0u);
}

bool schema_matches(const std::string& schema, const std::string& text) {
  return grammar_matches(Grammar::parse(json_schema_to_gbnf(schema)), text);
}

TEST(JsonSchema, ObjectsRequiredOptionalAdditional) {
  const std::string s = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "tag":{"type":"string"}},"required":["name"],"additionalProperties":false})";
  EXPECT_TRUE(schema_matches(s, R"({"name": "bob"})"));
  EXPECT_TRUE(schema_matches(s, R"({"name":"bob","age":42})"));
  EXPECT_TRUE(schema_matches(s, R"({"name":"bob","tag":"x"})"));
  EXPECT_TRUE(schema_matches(s, R"({"name":"b\"o\\b","age":-3,"tag":""})"));
  EXPECT_FALSE(schema_matches(s, R"({"age":42})"));
  EXPECT_FALSE(schema_matches(s, R"({"name":"bob","other":1})"));
  EXPECT_FALSE(schema_matches(s, R"({"name":"bob","age":4.5})"));
  EXPECT_FALSE(schema_matches(s, R"({"name":"bob","age":042})"));
  // Nothing required: any subset in order, commas right.
  const std::string o = R"({"properties":{"a":{"type":"boolean"},"b":{"type":"null"}}})";
  EXPECT_TRUE(schema_matches(o, "{}"));
  EXPECT_TRUE(schema_matches(o, R"({"b":null})"));
  EXPECT_TRUE(schema_matches(o, R"({"a":true,"b":null})"));
  EXPECT_FALSE(schema_matches(o, R"({,"b":null})"));
  // additionalProperties as a schema.
  const std::string m = R"({"type":"object","additionalProperties":{"type":"number"}})";
  EXPECT_TRUE(schema_matches(m, R"({"x":1.5e3,"y":-0.25})"));
  EXPECT_FALSE(schema_matches(m, R"({"x":"1"})"));
}

TEST(JsonSchema, ArraysEnumsConstFormats) {
  const std::string a = R"({"type":"array","items":{"enum":["red","green",3]},"minItems":1,"maxItems":2})";
  EXPECT_TRUE(schema_matches(a, R"(["red"])"));
  EXPECT_TRUE(schema_matches(a, R"(["green", 3])"));
  EXPECT_FALSE(schema_matches(a, "[]"));
  EXPECT_FALSE(schema_matches(a, R"(["red","red","red"])"));
  EXPECT_FALSE(schema_matches(a, R"(["blue"])"));
  EXPECT_TRUE(schema_matches(R"({"const":{"k":[1,2]}})", R"({"k":[1,2]})"));
  EXPECT_TRUE(schema_matches(R"({"type":"string","format":"date"})", R"("2024-02-29")"));
  EXPECT_FALSE(schema_matches(R"({"type":"string","format":"date"})", R"("2024-13-01")"));
  EXPECT_TRUE(schema_matches(R"({"type":"string","format":"date-time"})", R"("2024-02-29T23:59:01Z")"));
  EXPECT_TRUE(schema_matches(R"({"type":"string","format":"time"})", R"("07:08:09.123+02:00")"));
  EXPECT_TRUE(schema_matches(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(schema_matches(R"({"type":"string","format":"uuid"})", R"("123e4567")"));
  const std::string len = R"({"type":"string","minLength":2,"maxLength":3})";
  EXPECT_FALSE(schema_matches(len, R"("a")"));
  EXPECT_TRUE(schema_matches(len, R"("ab")"));
  EXPECT_TRUE(schema_matches(len, R"("a\nc")"));
  EXPECT_FALSE(schema_matches(len, R"("abcd")"));
}

TEST(JsonSchema, RefsAnyOfTypeLists) {
  const std::string s = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
      "anyOf":[{"$ref":"#/$defs/node"},{"type":["string","null"]}]})";
  EXPECT_TRUE(schema_matches(s, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_TRUE(schema_matches(s, R"("leaf")"));
  EXPECT_TRUE(schema_matches(s, "null"));
  EXPECT_FALSE(schema_matches(s, R"({"kids":[]})"));
  EXPECT_FALSE(schema_matches(s, "true"));
}

std::string schema_error(const std::string& schema) {
  try {
    json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, UnsupportedConstructsAreNamed) {
  EXPECT_NE(schema_error(R"({"type":"string","pattern":"^a+$"})").find("'pattern' at '#/pattern'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"properties":{"n":{"type":"integer","minimum":3}}})").find("#/properties/n/minimum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref":"http://x/y.json"})").find("$ref"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"string","format":"email"})").find("format 'email'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(schema_error("{nope").find("not valid JSON"), std::string::npos);
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = Grammar::parse(json_object_gbnf());
  EXPECT_TRUE(grammar_matches(g, R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
  EXPECT_FALSE(grammar_matches(g, "[1]"));
  EXPECT_FALSE(grammar_matches(g, R"({"a": })"));
}

// The Sampler with a grammar: only allowed tokens are drawn, end of generation
// only where the grammar can end, and a dead end throws GrammarDeadEnd.
TEST(GrammarSampler, MasksTheChainAndEndsCleanly) {
  TinyVocab tv;
  const int32_t n = static_cast<int32_t>(tv.pieces.size());
  for (float temp : {0.0f, 1.0f}) {
    SamplerParams p;
    p.temp = temp;
    p.seed = 7;
    p.grammar = Grammar::parse("root ::= \"{\" [a-c]+ \"}\"");
    p.grammar_vocab = tv.vocab();
    Sampler s(p, n);
    std::vector<float> logits(static_cast<size_t>(n), 0.0f);
    logits[16] = 10.0f;  // "x": the model's favourite, never allowed
    logits[12] = 5.0f;   // end of generation: only once the grammar can end
    std::string text;
    for (int step = 0; step < 50; ++step) {
      const int32_t t = s.sample(logits.data());
      if (t == tv.eos) break;
      text += tv.pieces[t];
    }
    EXPECT_TRUE(grammar_matches(p.grammar, text)) << text;
    EXPECT_TRUE(s.grammar_can_end());
  }
  SamplerParams p;
  p.grammar = Grammar::parse("root ::= \"q\"");
  p.grammar_vocab = tv.vocab();
  Sampler s(p, n);
  std::vector<float> logits(static_cast<size_t>(n), 0.0f);
  EXPECT_THROW(s.sample(logits.data()), GrammarDeadEnd);
}

// A lazy grammar (grammar_trigger): free until the generated text holds the trigger (here split over two
// tokens, "x" then "{"), then constrained from the trigger's first byte; reset_grammar() makes it lazy again.
TEST(GrammarSampler, LazyGrammarStartsAtItsTrigger) {
  TinyVocab tv;
  const int32_t n = static_cast<int32_t>(tv.pieces.size());
  SamplerParams p;
  p.temp = 0.0f;
  p.grammar = Grammar::parse("root ::= \"x{\" [a-c]+ \"}\"");
  p.grammar_vocab = tv.vocab();
  p.grammar_trigger = "x{";
  Sampler s(p, n);
  std::vector<float> logits(static_cast<size_t>(n), 0.0f);
  auto pick = [&](int32_t favourite) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[size_t(favourite)] = 10.0f;
    return s.sample(logits.data());
  };
  // Before the trigger: anything goes ("1" and "12" are not in the grammar), EOG too.
  EXPECT_EQ(pick(6), 6);
  EXPECT_EQ(pick(7), 7);
  EXPECT_TRUE(s.grammar_can_end());
  EXPECT_EQ(pick(16), 16);  // "x": the trigger's first half
  EXPECT_EQ(pick(0), 0);    // "{": the trigger is complete; the grammar has matched "x{"
  EXPECT_FALSE(s.grammar_can_end());
  EXPECT_NE(pick(6), 6) << "after the trigger, \"1\" breaks the grammar";
  EXPECT_EQ(pick(1), 1);  // "}" after a letter ends it
  EXPECT_TRUE(s.grammar_can_end());
  s.reset_grammar();  // a new reply: lazy again
  EXPECT_EQ(pick(6), 6);
  // A trigger followed by text the grammar refuses, in the same token: a dead end.
  SamplerParams q = p;
  q.grammar_trigger = "{";
  q.grammar = Grammar::parse("root ::= \"{a\"");
  Sampler s2(q, n);
  std::fill(logits.begin(), logits.end(), 0.0f);
  logits[14] = 10.0f;  // "{\"": trigger plus a quote the grammar refuses
  EXPECT_THROW(s2.sample(logits.data()), GrammarDeadEnd);
}

}  // namespace
}  // namespace opal
