// Jinja lexer (see lexer.h). Mirrors jinja2's lexer rules:
//  - newlines (\r\n, \r, \n) become \n; one final newline is dropped unless
//    keep_trailing_newline;
//  - text before `{%-`/`{{-`/`{#-` loses its trailing whitespace; with
//    lstrip_blocks, text before a block or comment tag (not `{{`, not `{%+`)
//    loses the spaces between the line start and the tag;
//  - `-%}`/`-}}`/`-#}` eat the whitespace after the tag; with trim_blocks,
//    `%}`/`#}` eat one newline (`+%}` keeps it);
//  - inside a tag, `%}`/`}}` only end it when brackets are balanced.
#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace opal::jinja {
namespace {

// Python's \s for str: Unicode whitespace. Returns the byte length of the
// whitespace character at `p`, or 0.
size_t space_len(std::string_view s, size_t p) {
  const auto b = static_cast<unsigned char>(s[p]);
  if (b < 0x80) return unicode::is_space(b) ? 1 : 0;
  size_t len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  if (p + len > s.size()) return 0;
  auto u = unicode::decode(s.substr(p, len));
  return (u.size() == 1 && unicode::is_space(u[0])) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t p) {
  while (p < s.size()) {
    size_t l = space_len(s, p);
    if (!l) break;
    p += l;
  }
  return p;
}

bool all_spaces(std::string_view s) { return skip_spaces(s, 0) == s.size(); }

std::string rstrip_spaces(std::string_view s) { return unicode::strip(s, nullptr, false, true); }

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& o) : opt_(o) {
    // Normalise newlines, drop one trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    const std::string_view s = src_;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t t = pos;
      while (true) {
        t = s.find('{', t);
        if (t == std::string_view::npos ||
            (t + 1 < s.size() && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
          break;
        ++t;
      }
      if (t == std::string_view::npos) {
        emit(TokenType::Data, std::string(s.substr(pos)), pos);
        break;
      }
      const char kind = s[t + 1];
      size_t after = t + 2;
      char sign = 0;
      if (after < s.size() && (s[after] == '-' || s[after] == '+')) sign = s[after++];
      std::string text(s.substr(pos, t - pos));
      apply_lstrip(text, sign, kind != '{', line_starting);
      if (!text.empty()) emit(TokenType::Data, std::move(text), pos);

      if (kind == '#') {
        size_t q = s.find("#}", after);
        if (q == std::string_view::npos) fail_at(t, "Missing end of comment tag");
        pos = end_modifier(q, after, line_starting);
        continue;
      }
      if (kind == '%' && try_raw(t, after, line_starting, pos)) continue;
      emit(kind == '%' ? TokenType::BlockBegin : TokenType::VarBegin, std::string(s.substr(t, after - t)), t);
      pos = lex_tag(after, kind == '%', line_starting);
    }
    Token end{TokenType::End, "", 0, 0};
    position(s.size(), end.line, end.column);
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  void apply_lstrip(std::string& text, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') {
      text = rstrip_spaces(text);
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_spaces(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
  }

  // Handles the end of a block or comment tag whose closing delimiter starts at
  // `q` (after an optional - or +). Returns the new position.
  size_t end_modifier(size_t q, size_t body_start, bool& line_starting) {
    const std::string_view s = src_;
    const size_t end = q + 2;
    size_t p = end;
    const char mod = q > body_start ? s[q - 1] : 0;
    if (mod == '-') p = skip_spaces(s, p);
    else if (mod != '+' && opt_.trim_blocks && p < s.size() && s[p] == '\n') ++p;
    // line_starting is true when the matched end text ends with a newline.
    line_starting = p > end && s[p - 1] == '\n';
    return p;
  }

  bool try_raw(size_t t, size_t after, bool& line_starting, size_t& pos) {
    const std::string_view s = src_;
    size_t p = skip_spaces(s, after);
    if (s.substr(p, 3) != "raw") return false;
    p = skip_spaces(s, p + 3);
    if (s.substr(p, 3) == "-%}") {
      p = skip_spaces(s, p + 3);
    } else if (s.substr(p, 2) == "%}") {
      p += 2;
    } else {
      return false;
    }
    // Body: up to {%[-+]? endraw %}
    size_t search = p;
    while (true) {
      size_t b = s.find("{%", search);
      if (b == std::string_view::npos) fail_at(t, "Missing end of raw directive");
      size_t q = b + 2;
      char sign = 0;
      if (q < s.size() && (s[q] == '-' || s[q] == '+')) sign = s[q++];
      q = skip_spaces(s, q);
      if (s.substr(q, 6) != "endraw") {
        search = b + 2;
        continue;
      }
      q = skip_spaces(s, q + 6);
      size_t endp;
      if (s.substr(q, 3) == "+%}") {
        endp = q + 3;
      } else if (s.substr(q, 3) == "-%}") {
        endp = skip_spaces(s, q + 3);
      } else if (s.substr(q, 2) == "%}") {
        endp = q + 2;
        if (opt_.trim_blocks && endp < s.size() && s[endp] == '\n') ++endp;
      } else {
        search = b + 2;
        continue;
      }
      std::string body(s.substr(p, b - p));
      apply_lstrip(body, sign, true, false);
      if (!body.empty()) emit(TokenType::Data, std::move(body), p);
      line_starting = endp > 0 && s[endp - 1] == '\n';
      pos = endp;
      return true;
    }
  }

  size_t lex_tag(size_t p, bool block, bool& line_starting) {
    const std::string_view s = src_;
    std::vector<char> balance;
    while (true) {
      p = skip_spaces(s, p);
      if (p >= s.size())
        fail_at(p, block ? "unexpected end of template, expected end of block statement ('%}')"
                         : "unexpected end of template, expected end of print statement ('}}')");
      if (balance.empty()) {
        if (block) {
          if (s.substr(p, 3) == "+%}") {
            emit(TokenType::BlockEnd, "%}", p);
            line_starting = false;
            return p + 3;
          }
          if (s.substr(p, 3) == "-%}") {
            emit(TokenType::BlockEnd, "%}", p);
            size_t e = skip_spaces(s, p + 3);
            line_starting = e > p + 3 && s[e - 1] == '\n';
            return e;
          }
          if (s.substr(p, 2) == "%}") {
            emit(TokenType::BlockEnd, "%}", p);
            size_t e = p + 2;
            if (opt_.trim_blocks && e < s.size() && s[e] == '\n') ++e;
            line_starting = e > p + 2;
            return e;
          }
        } else {
          if (s.substr(p, 3) == "-}}") {
            emit(TokenType::VarEnd, "}}", p);
            size_t e = skip_spaces(s, p + 3);
            line_starting = e > p + 3 && s[e - 1] == '\n';
            return e;
          }
          if (s.substr(p, 2) == "}}") {
            emit(TokenType::VarEnd, "}}", p);
            line_starting = false;
            return p + 2;
          }
        }
      }
      p = lex_token(p, balance);
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

  size_t digits(size_t p) const {  // (\d+_)*\d+ ; returns end or p when none
    const std::string_view s = src_;
    size_t q = p;
    if (q >= s.size() || !is_digit(s[q])) return p;
    while (q < s.size() && is_digit(s[q])) {
      ++q;
      if (q + 1 < s.size() && s[q] == '_' && is_digit(s[q + 1])) ++q;
    }
    return q;
  }

  size_t lex_token(size_t p, std::vector<char>& balance) {
    const std::string_view s = src_;
    const char c = s[p];
    if (is_digit(c)) {
      // Prefixed integers.
      if (c == '0' && p + 1 < s.size() && std::string_view("xXoObB").find(s[p + 1]) != std::string_view::npos) {
        size_t q = p + 2;
        while (q < s.size() && (std::isxdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
        emit(TokenType::Integer, std::string(s.substr(p, q - p)), p);
        return q;
      }
      size_t q = digits(p);
      bool is_float = false;
      if (q + 1 < s.size() && s[q] == '.' && is_digit(s[q + 1])) {
        q = digits(q + 1);
        is_float = true;
      }
      if (q < s.size() && (s[q] == 'e' || s[q] == 'E')) {
        size_t r = q + 1;
        if (r < s.size() && (s[r] == '+' || s[r] == '-')) ++r;
        size_t e = digits(r);
        if (e > r) {
          q = e;
          is_float = true;
        }
      }
      emit(is_float ? TokenType::Float : TokenType::Integer, std::string(s.substr(p, q - p)), p);
      return q;
    }
    if (is_name_start(c)) {
      size_t q = p;
      while (q < s.size() && is_name_char(s[q])) ++q;
      emit(TokenType::Name, std::string(s.substr(p, q - p)), p);
      return q;
    }
    if (c == '\'' || c == '"') {
      size_t q = p + 1;
      while (q < s.size() && s[q] != c) {
        if (s[q] == '\\') ++q;
        ++q;
      }
      if (q >= s.size()) fail_at(p, "unexpected end of string");
      emit(TokenType::String, unescape(s.substr(p + 1, q - p - 1)), p);
      return q + 1;
    }
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (s.substr(p, 2) == op) {
        emit(TokenType::Operator, op, p);
        return p + 2;
      }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) fail_at(p, fmt::format("unexpected '{}'", c));
        if (balance.back() != c) fail_at(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
        balance.pop_back();
      }
      emit(TokenType::Operator, std::string(1, c), p);
      return p + 1;
    }
    fail_at(p, fmt::format("unexpected char '{}'", c));
  }

  // Python "unicode-escape" decoding of a string literal's body.
  std::string unescape(std::string_view body) {
    std::string out;
    out.reserve(body.size());
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out.push_back(body[i]);
        continue;
      }
      const char e = body[++i];
      auto hex = [&](size_t n) -> bool {
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
          if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) return false;
          const char h = body[i + k];
          v = v * 16 + uint32_t(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (v > 0x10FFFF) return false;
        unicode::append_utf8(out, char32_t(v));
        i += n;
        return true;
      };
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
          if (!hex(2)) throw TemplateError("TemplateSyntaxError", "invalid \\x escape in string literal", 0, 0);
          break;
        case 'u':
          if (!hex(4)) throw TemplateError("TemplateSyntaxError", "invalid \\u escape in string literal", 0, 0);
          break;
        case 'U':
          if (!hex(8)) throw TemplateError("TemplateSyntaxError", "invalid \\U escape in string literal", 0, 0);
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              v = v * 8 + uint32_t(body[++i] - '0');
            unicode::append_utf8(out, char32_t(v));
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  void position(size_t offset, int& line, int& column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t idx = size_t(it - line_starts_.begin()) - 1;
    line = int(idx) + 1;
    column = 1;
    for (size_t k = line_starts_[idx]; k < offset && k < src_.size(); ++k)
      if ((static_cast<unsigned char>(src_[k]) & 0xC0) != 0x80) ++column;
  }

  void emit(TokenType type, std::string value, size_t offset) {
    Token tok{type, std::move(value), 1, 1};
    position(offset, tok.line, tok.column);
    tokens_.push_back(std::move(tok));
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    int line, column;
    position(offset, line, column);
    throw TemplateError("TemplateSyntaxError", what, line, column);
  }

  LexerOptions opt_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace opal::jinja
