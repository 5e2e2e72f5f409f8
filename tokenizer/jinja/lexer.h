// Jinja lexer: splits a template into data and tag tokens, applying jinja2's
// whitespace rules as transformers configures them (trim_blocks, lstrip_blocks,
// keep_trailing_newline=False, `-`/`+` modifiers, newline normalisation).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace opal::jinja {

enum class TokenType {
  Data,        // template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // value is the decoded literal
  Integer,
  Float,
  Operator,
  End,
};

struct Token {
  TokenType type;
  std::string value;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError (TemplateSyntaxError) with line and column.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace opal::jinja
