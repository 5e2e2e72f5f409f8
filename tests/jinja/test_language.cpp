// Unit tests of the Jinja language as jinja2 3.1 defines it (configured like
// transformers: trim_blocks, lstrip_blocks, loopcontrols). Each expected string
// is what Python jinja2 renders for the same template and variables.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace {

using Json = nlohmann::ordered_json;
using opal::jinja::Template;
using opal::jinja::TemplateError;

const Json& vars() {
  static const Json v = Json::parse(R"({
    "x": null, "d": {"a": 1, "b": [1, 2]}, "l": [1, 2, 3], "s": "h\u00e9llo", "n": 0, "f": 1.5, "t": true,
    "ws": " \u00a0a b\u3000\n",
    "items": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 2}]
  })");
  return v;
}

std::string render(const std::string& src, const Json& v = vars()) { return Template::parse(src).render(v); }

TemplateError render_error(const std::string& src, const Json& v = vars()) {
  try {
    render(src, v);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error from " << src;
  return TemplateError("none", "", 0, 0);
}

TEST(JinjaWhitespace, TrimBlocksRemovesNewlineAfterBlockTagButNotAfterPrint) {
  EXPECT_EQ(render("{% if t %}\nyes\n{% endif %}\nend"), "yes\nend");
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}"), "x\ny");
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(render("  {% if t %}\n    yes\n  {% endif %}\ndone"), "    yes\ndone");
  EXPECT_EQ(render("line1\n  {%+ if t %}kept{% endif %}"), "line1\n  kept");
  EXPECT_EQ(render("a\n  {# c #}\nb"), "a\nb");
}

TEST(JinjaWhitespace, MinusModifiersStripAllWhitespaceIncludingUnicode) {
  EXPECT_EQ(render("a {{- ' x ' -}} b {%- if t -%} c {%- endif -%} d"), "a x bcd");
  EXPECT_EQ(render("a\u00a0\n {{- 'x' }}"), "ax");
  EXPECT_EQ(render("{# comment #}a  {#- c -#}  b"), "ab");
}

TEST(JinjaWhitespace, PlusKeepsNewlineAndTrailingNewlineIsDropped) {
  EXPECT_EQ(render("{% if t +%}\nafter\n{% endif %}"), "\nafter\n");
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(JinjaWhitespace, RawBlock) { EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}"); }

TEST(JinjaUndefined, PrintsEmptyAndIsFalsy) {
  EXPECT_EQ(render("[{{ u }}]{% if u %}y{% else %}n{% endif %}{{ u is defined }}{{ u|length }}"), "[]nFalse0");
  EXPECT_EQ(render("{% for i in u %}x{% endfor %}{{ 'a' in u }}{{ u ~ 'a' }}{{ u|default('z') }}"), "Falseaz");
  EXPECT_EQ(render("{{ x.a }}|{{ d.zz }}|{{ d['zz'] }}|{{ l[10] }}|{{ 'abc'.zz }}"), "||||");
  EXPECT_EQ(render("{{ x.a is defined }}{{ d.c is defined }}{{ x.a|default('z') }}"), "FalseFalsez");
}

TEST(JinjaUndefined, OperationsOnUndefinedRaise) {
  EXPECT_EQ(render_error("{{ u.a }}").kind(), "UndefinedError");
  EXPECT_EQ(render_error("{{ u + 'a' }}").message(), "'u' is undefined");
  EXPECT_EQ(render_error("{{ d.c.e }}").message(), "'dict object' has no attribute 'c'");
  EXPECT_EQ(render_error("{{ x.a.b }}").message(), "'None' has no attribute 'a'");
  EXPECT_EQ(render_error("{{ u() }}").kind(), "UndefinedError");
  EXPECT_EQ(render_error("{{ u|tojson }}").kind(), "TypeError");
}

TEST(JinjaValues, PythonStrAndRepr) {
  EXPECT_EQ(render("{{ d }}{{ [1.0, 'a\\'b', \"x\\\"\", none, true] }}"),
            "{'a': 1, 'b': [1, 2]}[1.0, \"a'b\", 'x\"', None, True]");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ none }} {{ x }}"), "(1, 2) (1,) None None");
  EXPECT_EQ(render("{{ [ws] }}"), "[' \\xa0a b\\u3000\\n']");
}

TEST(JinjaValues, NumbersPrintAsPython) {
  EXPECT_EQ(render("{{ 1e20 }} {{ 1e15 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ 3/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7 % 3 }}"),
            "1e+20 1000000000000000.0 0.30000000000000004 1e-05 1.5 2.0 3 2");
  EXPECT_EQ(render("{{ 1e16 }} {{ 0.0001 }} {{ -2.5e-7 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ true + 1 }}"),
            "1e+16 0.0001 -2.5e-07 1024 0.5 2");
  EXPECT_EQ(render("{{ -5 // 2 }} {{ 5 % -3 }} {{ 5.5 // 2 }} {{ 5.5 % 2 }}"), "-3 -1 2.0 1.5");
  EXPECT_EQ(render_error("{{ 7 / 0 }}").kind(), "ZeroDivisionError");
}

TEST(JinjaOperators, TruthinessComparisonAndMembership) {
  EXPECT_EQ(render("{{ not t }} {{ t and 'yes' }} {{ n or 'no' }} {{ n and 'x' }} {{ '' or none }}"),
            "False yes no 0 None");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ true == 1 }}"),
            "True False True True True");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 not in l }} {{ 'a' in d }} {{ {'a': [1]} == {'a': [1]} }}"),
            "True False True True");
  EXPECT_EQ(render("{{ 'a' ~ 1 * 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ -(l|length) }} {{ -2|abs }}"),
            "a2 64 5 -3 2");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}").message(), "can only concatenate str (not \"int\") to str");
}

TEST(JinjaOperators, ConditionalExpression) {
  EXPECT_EQ(render("{{ 1 if t else 2 }}|{{ 1 if n }}|{{ (1 if n) is defined }}"), "1||False");
}

TEST(JinjaStrings, SlicingIndexingAndMethods) {
  EXPECT_EQ(render("{{ s[1:3] }} {{ s|length }} {{ s[::-1] }} {{ s.upper() }} {{ s[-2:] }} {{ s[::2] }} {{ s[1] }}"),
            "\u00e9l 5 oll\u00e9h H\u00c9LLO lo hlo \u00e9");
  EXPECT_EQ(render("{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-1] }} {{ l[5:1:-1] }}"),
            "[3, 2, 1] [2, 3] [1, 2] 3 [3]");
  EXPECT_EQ(render("{{ ws|trim }}|{{ ws.strip() }}|{{ ws.split() }}|{{ ws.rstrip(' \\n') }}|"),
            "a b|a b|['a', 'b']| \u00a0a b\u3000|");
  EXPECT_EQ(render("{{ 'x</think>\\n\\nyy'.split('</think>')[-1].lstrip('\\n') }} {{ 'a,b,c'.rsplit(',', 1) }}"),
            "yy ['a,b', 'c']");
  EXPECT_EQ(render("{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x','c')) }} {{ 'aaa'.replace('a','b',2) }}"),
            "True True bba");
  EXPECT_EQ(render("{{ 'h\u00e9llo'.find('l') }} {{ '-'.join(['a','b']) }} {{ 'ab'.center(7) }}|"), "2 a-b    ab  |");
  EXPECT_EQ(render("{{ 'hELLO'|capitalize }} {{ 'a-b c(d'|title }} {{ \"they're\".title() }} {{ '\u00df'.upper() }}"),
            "Hello A-B C(D They'Re SS");
  EXPECT_EQ(render("{{ '\u043f\u0440\u0438\u0432\u0435\u0442'.upper() }} {{ '\u0391\u0392\u0393'.lower() }}"),
            "\u041f\u0420\u0418\u0412\u0415\u0422 \u03b1\u03b2\u03b3");
}

TEST(JinjaStrings, Formatting) {
  EXPECT_EQ(render("{{ \"%s-%d\" % ('a', 3) }} {{ \"%5.2f|%-4d|%03d|%x\" % (3.14159, 7, 5, 255) }} {{ '%(a)s' % d }}"),
            "a-3  3.14|7   |005|ff 1");
  EXPECT_EQ(render("{{ '{} {}'.format(1, 'b') }} {{ '{0:>5}|{1:.3f}|{name}'.format('ab', 2.5, name='z') }}"),
            "1 b    ab|2.500|z");
  EXPECT_EQ(render("{{ '{:,}'.format(1234567) }} {{ '{!r}'.format('a') }} {{ '{{}}'.format() }}"), "1,234,567 'a' {}");
}

TEST(JinjaFilters, CommonFilters) {
  EXPECT_EQ(render("{{ l|join }} {{ l|map('string')|join(',') }} {{ d|list }} {{ d|length }} {{ l|sum }} {{ l|max }}"),
            "123 1,2,3 ['a', 'b'] 2 6 3");
  EXPECT_EQ(render("{{ [3,1,2]|sort }} {{ ['b','A','a']|sort }} {{ [1,2]|reverse|list }} {{ 'abc'|reverse }}"),
            "[1, 2, 3] ['A', 'a', 'b'] [2, 1] cba");
  EXPECT_EQ(render("{{ x|default('y') }} {{ x|default('y', true) }} {{ ''|d('y') }} {{ none|string }}"),
            "None y  None");
  EXPECT_EQ(
      render("{{ '3'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int(7) }} {{ '2.5'|float }} {{ 2.7|int }} {{ 2.5|round }}"),
      "4 3 7 2.5 2 2.0");
  EXPECT_EQ(render("{{ []|first }}|{{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ l|batch(2)|list }}"),
            "|1 3 a [[1, 2], [3]]");
  EXPECT_EQ(render("{{ '<a&b>'|e }} {{ \"x\\ny\"|indent(2) }} {{ 'abc'|replace('b', 'x') }} {{ 'hello world "
                   "foo'|truncate(9) }}"),
            "&lt;a&amp;b&gt; x\n  y axc hello...");
  EXPECT_EQ(render("{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}{{ d|items|list }}"),
            "a=1;b=[1, 2];[('a', 1), ('b', [1, 2])]");
}

TEST(JinjaFilters, SelectRejectMapAttribute) {
  EXPECT_EQ(render("{{ items|selectattr('role','equalto','user')|list }}"), "[{'role': 'user', 'content': 'hi'}]");
  EXPECT_EQ(render("{{ items|rejectattr('role','equalto','user')|map(attribute='content')|list }}"), "['yo']");
  EXPECT_EQ(render("{{ items|map(attribute='x', default=0)|list }} {{ items|selectattr('x')|list|length }}"),
            "[0, 2] 1");
  EXPECT_EQ(render("{{ ['a', 'code', 'b']|reject('equalto', 'code')|join(', ') }} {{ l|select('odd')|list }}"),
            "a, b [1, 3]");
}

TEST(JinjaFilters, TojsonIsPythonJsonDumps) {
  EXPECT_EQ(render("{{ items[1]|tojson }}"), "{\"role\": \"assistant\", \"content\": \"yo\", \"x\": 2}");
  EXPECT_EQ(render("{{ d|tojson(indent=4) }}"), "{\n    \"a\": 1,\n    \"b\": [\n        1,\n        2\n    ]\n}");
  EXPECT_EQ(render("{{ {'z':1,'a':{'q':[]}}|tojson(sort_keys=true) }} {{ {}|tojson(indent=2) }}"),
            "{\"a\": {\"q\": []}, \"z\": 1} {}");
  EXPECT_EQ(
      render("{{ 'Z\u00fcrich\\n\"\\\\'|tojson }} {{ [1.0, 2, none, true]|tojson }} {{ s|tojson(ensure_ascii=true) }}"),
      "\"Z\u00fcrich\\n\\\"\\\\\" [1.0, 2, null, true] \"h\\u00e9llo\"");
  EXPECT_EQ(render("{{ d|tojson(separators=(',',':')) }} {{ '<&>'|tojson }}"), "{\"a\":1,\"b\":[1,2]} \"<&>\"");
}

TEST(JinjaTests, BuiltinTests) {
  EXPECT_EQ(
      render(
          "{{ t is true }} {{ n is false }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }}"),
      "True False True True True True");
  EXPECT_EQ(render("{{ l is iterable }} {{ s is iterable }} {{ d is mapping }} {{ l is sequence }} {{ x is none }} {{ "
                   "s is string }}"),
            "True True True True True True");
  EXPECT_EQ(render("{{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 3 is even }} {{ 1 is in l }} {{ u is undefined }} {{ 3 "
                   "is ge 2 }}"),
            "True True False True True True");
  EXPECT_EQ(render("{{ not u is defined }} {{ x is not none }} {{ d is not mapping }}"), "True False False");
}

TEST(JinjaLoops, LoopVariables) {
  EXPECT_EQ(render("{% for a in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }};{% endfor %}"),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(render("{% for a in l %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x','y') }}|{% endfor %}"),
            "2x|13y|2x|");
  EXPECT_EQ(render("{% for i in l if i > 1 %}{{ loop.index }}:{{ i }}/{{ loop.length }};{% endfor %}"), "1:2/2;2:3/2;");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=[1, 2];");
  EXPECT_EQ(
      render("{% for i in l %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}"
             "{% endfor %}"),
      "13");
  EXPECT_EQ(
      render(
          "{% for x in l %}{% set o = loop %}{% for y in [1] %}{{ o.index }}{{ loop.index }}{% endfor %}{% endfor %}"),
      "112131");
}

TEST(JinjaScoping, SetInsideLoopDoesNotLeakOrCarryOver) {
  EXPECT_EQ(render("{% set y = 0 %}{% for i in l %}{{ y }}{% set y = i %}{{ y }}|{% endfor %}{{ y }}"), "01|02|03|0");
  EXPECT_EQ(render("{% if t %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set x2 %}inner {{ l }}{% endset %}[{{ x2 }}]"), "[inner [1, 2, 3]]");
}

TEST(JinjaScoping, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(a=1, b='x') %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}"
                   "{{ ns.a }}{{ ns.b }}[{{ ns.c }}]"),
            "7x[]");
  EXPECT_EQ(render_error("{% set q = 1 %}{% set q.a = 2 %}").kind(), "TemplateRuntimeError");
}

TEST(JinjaMacros, DefaultsCallerAndFilterBlocks) {
  EXPECT_EQ(render("{% macro m(a, b=2, c='z') %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}"
                   "{{ m(1, c='q') }}{{ m() }}"),
            "[1|2|z][1|3|z][1|2|q][|2|z]");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"), "(1, 2){'k': 3}");
  EXPECT_EQ(render("{% macro m(x) %}<{{ caller() }}{{ x }}>{% endmacro %}{% call m(5) %}body{% endcall %}"), "<body5>");
  EXPECT_EQ(render("{% filter upper %}abc {{ s }}{% endfilter %}"), "ABC H\u00c9LLO");
}

TEST(JinjaGlobals, RangeDictNamespaceStrftimeRaise) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1) }}"),
            "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1}");
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_isdst = -1;
  opal::jinja::RenderOptions o;
  o.now = std::mktime(&tm);
  EXPECT_EQ(Template::parse("{{ strftime_now('%d %b %Y') }}").render(Json::object(), o), "26 Jul 2024");
  const TemplateError e = render_error("a\n  {{ raise_exception('boom: ' ~ 1) }}");
  EXPECT_TRUE(e.raised_by_template());
  EXPECT_EQ(e.message(), "boom: 1");
  EXPECT_EQ(e.line(), 2);
}

TEST(JinjaSandbox, ListsAndDictsAreImmutable) {
  EXPECT_EQ(render_error("{{ l.append(4) }}").kind(), "SecurityError");
  EXPECT_EQ(render_error("{{ d.update({'c': 1}) }}").kind(), "SecurityError");
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z', 5) }} {{ d.get('z') }} {{ l.index(2) }}"), "1 5 None 1");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  try {
    Template::parse("ok\n{% if x %}\n{{ 1 + }}\n{% endif %}");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), "TemplateSyntaxError");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 8);
    EXPECT_NE(std::string(e.what()).find("line 3, column 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Template::parse("{% if x %}no end"), TemplateError);
  EXPECT_THROW(Template::parse("{% for %}{% endfor %}"), TemplateError);
  EXPECT_THROW(Template::parse("{{ x|nosuchfilter }}"), TemplateError);
  EXPECT_THROW(Template::parse("{{ x is nosuchtest }}"), TemplateError);
  EXPECT_THROW(Template::parse("{% include 'x' %}"), TemplateError);
  EXPECT_THROW(Template::parse("{{ 'unterminated }}"), TemplateError);
  EXPECT_THROW(Template::parse("{{ (1 }}"), TemplateError);
  EXPECT_THROW(Template::parse("{% break %}"), TemplateError);
}

TEST(JinjaErrors, RuntimeErrorsNameTheExpressionPosition) {
  const TemplateError e = render_error("line one\n  {{ 'a' + l }}");
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 10);  // the '+'
  EXPECT_EQ(render_error("{% for a in 5 %}{% endfor %}").kind(), "TypeError");
  EXPECT_EQ(render_error("{{ x() }}").kind(), "TypeError");
}

TEST(JinjaErrors, VariablesMustBeAnObject) { EXPECT_THROW(render("x", Json::array()), TemplateError); }

}  // namespace
