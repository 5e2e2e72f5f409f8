// Grammar-constrained sampling: llama.cpp's GBNF syntax, compiled into rules of
// terminal (code point class) and rule-reference elements, matched by a set of
// pushdown stacks over UTF-8 code points. See docs/structured-output.md.
//
//   auto g = opal::Grammar::parse(gbnf_text);            // throws opal::Error naming line:column
//   auto tv = std::make_shared<opal::GrammarVocab>(pieces, eog_ids);   // once per vocabulary
//   opal::GrammarState st(g, tv);                        // one per sequence
//   st.allowed(mask);      // mask[t] = 1 when token t's bytes can continue the grammar
//   st.accept(token);      // advance over the token's bytes (throws if it cannot)
//   st.can_end();          // the grammar may stop here (end-of-generation allowed)
//
// Token masks walk a byte trie of the vocabulary, so tokens sharing a prefix
// share the work, and a subtree is dropped as soon as no stack survives. Stacks
// are hash-consed (equal stacks have equal ids), which makes the stack set an
// exact key: masks are cached per set.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace opal {

// The grammar cannot go on: no token of the vocabulary continues it (or the
// only continuations were banned). The generation must end with an error.
class GrammarDeadEnd : public Error {
 public:
  explicit GrammarDeadEnd(const std::string& msg) : Error(msg) {}
};

// One element of a compiled alternative.
struct GrammarElem {
  enum Kind : uint8_t { end, chars, rule } kind = end;
  uint32_t index = 0;  // chars: class index; rule: rule index
};

// A set of code points: sorted inclusive ranges, optionally negated.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  bool contains(uint32_t cp) const;
  // Whether some code point in [lo, hi] is in the class.
  bool intersects(uint32_t lo, uint32_t hi) const;
};

class Grammar {
 public:
  // Parses GBNF text; the start rule is `root` (or `start_rule`). Throws
  // opal::Error naming the line, column and problem (unknown rule, left
  // recursion, bad escape, ...).
  static std::shared_ptr<const Grammar> parse(std::string_view text, std::string_view start_rule = "root");

  size_t n_rules() const { return rules_.size(); }
  uint32_t root() const { return root_; }
  const std::vector<std::vector<GrammarElem>>& alternatives(uint32_t rule) const { return rules_[rule]; }
  const CharClass& char_class(uint32_t i) const { return classes_[i]; }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class GrammarParser;
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<GrammarElem>>> rules_;  // rule -> alternatives -> elements (end-terminated)
  std::vector<CharClass> classes_;
  uint32_t root_ = 0;
};

// The vocabulary as the matcher sees it: each token's bytes in a trie.
// Tokens with empty text (control tokens) are never allowed, except the
// end-of-generation ones, which are allowed exactly when the grammar can end.
class GrammarVocab {
 public:
  GrammarVocab(const std::vector<std::string>& pieces, const std::vector<int32_t>& eog_tokens);
  int32_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t t) const { return pieces_[t]; }
  bool is_eog(int32_t t) const { return eog_[t] != 0; }
  const std::vector<int32_t>& eog_tokens() const { return eog_list_; }
  size_t max_piece_bytes() const { return max_piece_bytes_; }

  struct Node {
    uint32_t first_child = 0;  // index of the first child, 0 = none (the root is 0)
    uint32_t next_sibling = 0;
    uint32_t tokens_begin = 0;  // into token_ids: tokens whose text ends here
    uint32_t tokens_end = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& node_tokens() const { return token_ids_; }

 private:
  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> eog_;
  std::vector<int32_t> eog_list_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  size_t max_piece_bytes_ = 0;
};

// The matcher state of one sequence.
class GrammarState {
 public:
  GrammarState(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab);
  ~GrammarState();
  GrammarState(GrammarState&&) noexcept;
  GrammarState& operator=(GrammarState&&) noexcept;

  // mask[t] = 1 when token t may come next, 0 otherwise (n_vocab entries).
  // Returns the number of allowed tokens (0: the grammar is stuck).
  size_t allowed(std::vector<uint8_t>& mask);
  // Sets logits[t] = -inf for every token that may not come next (n_vocab
  // entries). Returns the number of allowed tokens.
  size_t mask_logits(float* logits);
  // Whether token t may come next (one token's walk; cheaper than a mask).
  bool allows(int32_t token);
  // Advances over token t. Throws opal::Error if the grammar rejects it.
  void accept(int32_t token);
  // Back to the start rule (a new reply).
  void reset();
  // Advances over raw text (tests, prefilled output). Returns false, leaving the
  // state unchanged, when the text cannot continue the grammar.
  bool accept_text(std::string_view text);
  // The grammar is complete here (no pending partial character).
  bool can_end() const;
  // No continuation at all: the grammar is complete and accepts nothing more.
  bool finished() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// Whole-string check (tests): does `text` match the grammar from its start rule?
bool grammar_matches(const std::shared_ptr<const Grammar>& grammar, std::string_view text);

// JSON Schema (as JSON text) -> GBNF text. Throws opal::Error naming the
// construct and its JSON pointer when the schema uses something Opal cannot
// compile into a grammar.
std::string json_schema_to_gbnf(std::string_view schema_json);
// A grammar for any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace opal
