// GBNF parser (llama.cpp's grammar syntax) -> Grammar rules.
//
//   name ::= alt1 | alt2         rules; `root` starts; names [A-Za-z0-9_-]
//   "lit\n\x41\u00e9"            literals with \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
//   [a-z_] [^"\\] .              classes with ranges and negation; . is any character
//   ( ... )  x*  x+  x?  x{m}  x{m,}  x{m,n}     grouping and repetition
//   # comment                    to end of line
// Newlines end a rule except right after `::=`, after `|` and inside parentheses.
// Repetitions are rewritten into helper rules (`name_N`), groups into their own
// rules, so the matcher only sees sequences of code point classes and rule
// references. Undefined rules and left recursion are errors.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "sampling/grammar.h"

namespace opal {

bool CharClass::contains(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  return in != negated;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges) {
      if (a <= hi && b >= lo) return true;
    }
    return false;
  }
  // Negated: some point of [lo, hi] lies outside every range.
  uint32_t cur = lo;
  std::vector<std::pair<uint32_t, uint32_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [a, b] : sorted) {
    if (a > cur) return true;
    if (b >= cur) {
      if (b >= hi) return false;
      cur = b + 1;
    }
  }
  return cur <= hi;
}

class GrammarParser {
 public:
  explicit GrammarParser(std::string_view text) : src_(text) {}

  std::shared_ptr<const Grammar> run(std::string_view start_rule) {
    skip_space(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip_space(true);
    }
    // Every referenced rule defined.
    for (size_t r = 0; r < g_->names_.size(); ++r) {
      if (!defined_[r]) {
        fail("grammar: rule '{}' is used (line {}) but never defined", g_->names_[r], first_use_line_[r]);
      }
    }
    auto it = ids_.find(std::string(start_rule));
    if (it == ids_.end()) fail("grammar: no '{}' rule (the start rule)", start_rule);
    g_->root_ = it->second;
    check_left_recursion();
    return g_;
  }

 private:
  std::string_view src_;
  size_t pos_ = 0;
  std::shared_ptr<Grammar> g_ = std::make_shared<Grammar>();
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<int> first_use_line_;
  int depth_ = 0;

  std::pair<int, int> line_col(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    auto [line, col] = line_col(pos_);
    throw Error(fmt::format("grammar: line {}, column {}: {}", line, col, fmt::format(f, std::forward<Args>(args)...)));
  }

  bool at_end() const { return pos_ >= src_.size(); }
  char peek() const { return at_end() ? '\0' : src_[pos_]; }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == '#') {
        while (!at_end() && src_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(src_[pos_])) ++pos_;
    if (pos_ == start) error("expected a rule name, got '{}'", peek());
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(g_->names_.size());
    g_->names_.push_back(name);
    g_->rules_.emplace_back();
    defined_.push_back(false);
    first_use_line_.push_back(line_col(pos_).first);
    ids_.emplace(name, id);
    return id;
  }

  uint32_t new_helper(const std::string& base) {
    std::string name;
    for (int n = static_cast<int>(g_->names_.size());; ++n) {
      name = fmt::format("{}_{}", base, n);
      if (!ids_.count(name)) break;
    }
    const uint32_t id = rule_id(name);
    defined_[id] = true;
    return id;
  }

  uint32_t add_class(CharClass cls) {
    g_->classes_.push_back(std::move(cls));
    return static_cast<uint32_t>(g_->classes_.size() - 1);
  }

  void parse_rule() {
    const std::string name = parse_name();
    const uint32_t id = rule_id(name);
    if (defined_[id]) error("rule '{}' is defined twice", name);
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") error("expected '::=' after rule name '{}'", name);
    pos_ += 3;
    skip_space(true);
    defined_[id] = true;
    g_->rules_[id] = parse_alternatives(name);
    if (!at_end() && peek() != '\n' && peek() != '\r') error("unexpected '{}' at the end of rule '{}'", peek(), name);
  }

  std::vector<std::vector<GrammarElem>> parse_alternatives(const std::string& rule_name) {
    std::vector<std::vector<GrammarElem>> alts;
    alts.push_back(parse_sequence(rule_name));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(rule_name));
    }
    return alts;
  }

  static uint32_t parse_hex(std::string_view s, size_t& pos, int n, const GrammarParser& p) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos >= s.size()) p.error("escape ends early: expected {} hex digits", n);
      const char c = s[pos++];
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        p.error("bad hex digit '{}' in escape", c);
      }
      v = v * 16 + d;
    }
    return v;
  }

  // One code point of a literal or class (UTF-8 decoded, escapes resolved).
  uint32_t parse_char() {
    if (at_end()) error("unexpected end of grammar inside a literal or class");
    const unsigned char c = static_cast<unsigned char>(src_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (at_end()) error("escape at the end of the grammar");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': return '\\';
        case '"': return '"';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        case 'x': return parse_hex(src_, pos_, 2, *this);
        case 'u': return parse_hex(src_, pos_, 4, *this);
        case 'U': return parse_hex(src_, pos_, 8, *this);
        default: --pos_; error("unknown escape '\\{}'", e);
      }
    }
    // UTF-8 decode.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > src_.size()) error("invalid UTF-8 in the grammar text");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) {
      const unsigned char cc = static_cast<unsigned char>(src_[pos_ + i]);
      if ((cc & 0xC0) != 0x80) error("invalid UTF-8 in the grammar text");
      cp = (cp << 6) | (cc & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  // One element (before any repetition suffix): appended to `seq`. Returns the
  // index in seq where it starts, so a suffix can wrap it.
  void parse_primary(std::vector<GrammarElem>& seq, const std::string& rule_name) {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      while (peek() != '"') {
        if (at_end() || peek() == '\n') error("unterminated string literal");
        const uint32_t cp = parse_char();
        CharClass cls;
        cls.ranges.push_back({cp, cp});
        seq.push_back({GrammarElem::chars, add_class(std::move(cls))});
      }
      ++pos_;
      return;
    }
    if (c == '[') {
      ++pos_;
      CharClass cls;
      if (peek() == '^') {
        cls.negated = true;
        ++pos_;
      }
      while (peek() != ']') {
        if (at_end()) error("unterminated character class");
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
          if (hi < lo) error("character range is reversed ({:#x}-{:#x})", lo, hi);
        }
        cls.ranges.push_back({lo, hi});
      }
      ++pos_;
      seq.push_back({GrammarElem::chars, add_class(std::move(cls))});
      return;
    }
    if (c == '.') {
      ++pos_;
      CharClass cls;
      cls.negated = true;  // nothing excluded: any code point
      seq.push_back({GrammarElem::chars, add_class(std::move(cls))});
      return;
    }
    if (c == '(') {
      ++pos_;
      ++depth_;
      skip_space(true);
      const uint32_t sub = new_helper(rule_name);
      auto alts = parse_alternatives(rule_name);
      g_->rules_[sub] = std::move(alts);
      if (peek() != ')') error("expected ')'");
      ++pos_;
      --depth_;
      seq.push_back({GrammarElem::rule, sub});
      return;
    }
    if (is_name_char(c)) {
      const std::string name = parse_name();
      seq.push_back({GrammarElem::rule, rule_id(name)});
      return;
    }
    error("unexpected '{}'", c);
  }

  int parse_int() {
    const size_t start = pos_;
    int v = 0;
    while (!at_end() && src_[pos_] >= '0' && src_[pos_] <= '9') {
      v = v * 10 + (src_[pos_++] - '0');
      if (v > 100000) error("repetition count too large");
    }
    if (pos_ == start) error("expected a number in the repetition");
    return v;
  }

  // Rewrites the last element (elements [start, end) of seq) repeated
  // min..max times (max < 0: unbounded).
  void repeat(std::vector<GrammarElem>& seq, size_t start, int min, int max, const std::string& rule_name) {
    std::vector<GrammarElem> item(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end());
    seq.resize(start);
    if (item.size() != 1) {  // a literal of several characters: one rule
      const uint32_t r = new_helper(rule_name);
      auto alt = item;
      alt.push_back({GrammarElem::end, 0});
      g_->rules_[r] = {alt};
      item = {{GrammarElem::rule, r}};
    }
    const GrammarElem x = item[0];
    for (int i = 0; i < min; ++i) seq.push_back(x);
    if (max < 0) {  // x* as star ::= x star | ""
      const uint32_t star = new_helper(rule_name);
      g_->rules_[star] = {{x, {GrammarElem::rule, star}, {GrammarElem::end, 0}}, {{GrammarElem::end, 0}}};
      seq.push_back({GrammarElem::rule, star});
      return;
    }
    // (max - min) nested optionals: opt_k ::= x opt_{k-1} | ""
    uint32_t inner = 0;
    bool has_inner = false;
    for (int i = 0; i < max - min; ++i) {
      const uint32_t opt = new_helper(rule_name);
      std::vector<GrammarElem> alt{x};
      if (has_inner) alt.push_back({GrammarElem::rule, inner});
      alt.push_back({GrammarElem::end, 0});
      g_->rules_[opt] = {alt, {{GrammarElem::end, 0}}};
      inner = opt;
      has_inner = true;
    }
    if (has_inner) seq.push_back({GrammarElem::rule, inner});
  }

  std::vector<GrammarElem> parse_sequence(const std::string& rule_name) {
    std::vector<GrammarElem> seq;
    while (!at_end()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      const size_t start = seq.size();
      const bool is_literal = c == '"';
      parse_primary(seq, rule_name);
      skip_space(depth_ > 0);
      // Suffixes apply to the whole primary (a literal's characters too).
      while (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        if (is_literal && seq.size() == start) break;
        const char s = src_[pos_++];
        int min = 0, max = -1;
        if (s == '+') {
          min = 1;
        } else if (s == '?') {
          max = 1;
        } else if (s == '{') {
          skip_space(false);
          min = parse_int();
          skip_space(false);
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            max = peek() == '}' ? -1 : parse_int();
            skip_space(false);
          } else {
            max = min;
          }
          if (peek() != '}') error("expected '}}' to close the repetition");
          ++pos_;
          if (max >= 0 && max < min) error("repetition {{{},{}}} has max < min", min, max);
        }
        repeat(seq, start, min, max, rule_name);
        skip_space(depth_ > 0);
        if (seq.size() != start + 1 && seq.size() != start) {
          // x{m,n} expanded into several elements: a further suffix wraps them all.
          const uint32_t r = new_helper(rule_name);
          std::vector<GrammarElem> alt(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end());
          alt.push_back({GrammarElem::end, 0});
          g_->rules_[r] = {alt};
          seq.resize(start);
          seq.push_back({GrammarElem::rule, r});
        } else if (seq.size() == start) {
          // x{0} matches nothing: an empty rule keeps later suffixes well defined.
          const uint32_t r = new_helper(rule_name);
          g_->rules_[r] = {{{GrammarElem::end, 0}}};
          seq.push_back({GrammarElem::rule, r});
        }
      }
    }
    seq.push_back({GrammarElem::end, 0});
    return seq;
  }

  // A rule that can derive itself without consuming a character would make the
  // matcher's expansion loop forever: refuse it, naming the rule.
  void check_left_recursion() const {
    const size_t n = g_->rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : g_->rules_[r]) {
          bool all = true;
          for (const auto& e : alt) {
            if (e.kind == GrammarElem::end) break;
            if (e.kind == GrammarElem::chars || !nullable[e.index]) {
              all = false;
              break;
            }
          }
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s when s can start r without input before it.
    std::vector<int> color(n, 0);
    for (size_t s0 = 0; s0 < n; ++s0) {
      if (color[s0]) continue;
      // Iterative DFS.
      std::vector<size_t> path{s0};
      std::vector<std::vector<uint32_t>> succ{left_edges(s0, nullable)};
      std::vector<size_t> next{0};
      color[s0] = 1;
      while (!path.empty()) {
        const size_t top = path.size() - 1;
        if (next[top] < succ[top].size()) {
          const uint32_t v = succ[top][next[top]++];
          if (color[v] == 1) {
            fail("grammar: rule '{}' is left-recursive (it can reach itself without reading a character)",
                 g_->names_[v]);
          }
          if (color[v] == 0) {
            color[v] = 1;
            path.push_back(v);
            succ.push_back(left_edges(v, nullable));
            next.push_back(0);
          }
        } else {
          color[path.back()] = 2;
          path.pop_back();
          succ.pop_back();
          next.pop_back();
        }
      }
    }
  }

  std::vector<uint32_t> left_edges(size_t r, const std::vector<bool>& nullable) const {
    std::vector<uint32_t> out;
    for (const auto& alt : g_->rules_[r]) {
      for (const auto& e : alt) {
        if (e.kind != GrammarElem::rule) break;
        out.push_back(e.index);
        if (!nullable[e.index]) break;
      }
    }
    return out;
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text, std::string_view start_rule) {
  return GrammarParser(text).run(start_rule);
}

}  // namespace opal
