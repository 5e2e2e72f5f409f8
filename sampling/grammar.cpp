// Grammar matcher: a set of pushdown stacks over UTF-8 code points, and token
// masks over a byte trie of the vocabulary.
//
// Stacks. A stack is a chain of frames {position in an alternative, parent};
// frames are hash-consed in a per-state arena, so a stack is one int (its top
// frame) and equal stacks are equal ints; -1 is the empty stack (the grammar
// is complete). A stack in a set is always "expanded": its top position is a
// code point class. expand(frame) resolves rule references (one stack per
// alternative) and pops finished alternatives; after(frame) = the expanded
// stacks once the top class has consumed a code point. Both are memoized per
// frame, so advancing a set over a code point is a class test and a copy per
// stack.
//
// Masks. The vocabulary trie is walked depth first with the stack set of each
// depth; a code point completed by a byte advances the set, an empty set drops
// the subtree, and a token ending at a node is allowed when its set is
// non-empty (or its last character is incomplete but still possible). Masks
// are cached by (sorted stack set, pending partial character).
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "sampling/grammar.h"

namespace opal {

GrammarVocab::GrammarVocab(const std::vector<std::string>& pieces, const std::vector<int32_t>& eog_tokens)
    : n_vocab_(static_cast<int32_t>(pieces.size())), pieces_(pieces), eog_(pieces.size(), 0) {
  for (int32_t t : eog_tokens) {
    if (t >= 0 && t < n_vocab_ && !eog_[t]) {
      eog_[t] = 1;
      eog_list_.push_back(t);
    }
  }
  // Insert tokens in byte order so that each node's children come out sorted
  // and siblings are appended in order.
  std::vector<int32_t> order;
  order.reserve(pieces.size());
  for (int32_t t = 0; t < n_vocab_; ++t) {
    if (!pieces_[t].empty() && !eog_[t]) order.push_back(t);
  }
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b] || (pieces_[a] == pieces_[b] && a < b); });
  nodes_.push_back(Node{});
  std::vector<uint32_t> last_child{0};             // per node: its last child (0 = none)
  std::vector<std::pair<uint32_t, int32_t>> ends;  // (node, token)
  std::vector<uint32_t> path{0};                   // path[d] = node at depth d for the previous token
  std::string prev;
  for (int32_t t : order) {
    const std::string& s = pieces_[t];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const uint32_t parent = path[d];
      const uint32_t id = static_cast<uint32_t>(nodes_.size());
      Node n;
      n.byte = static_cast<uint8_t>(s[d]);
      nodes_.push_back(n);
      last_child.push_back(0);
      if (last_child[parent] == 0) {
        nodes_[parent].first_child = id;
      } else {
        nodes_[last_child[parent]].next_sibling = id;
      }
      last_child[parent] = id;
      path.push_back(id);
    }
    ends.emplace_back(path[s.size()], t);
    max_piece_bytes_ = std::max(max_piece_bytes_, s.size());
    prev = s;
  }
  std::stable_sort(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  token_ids_.reserve(ends.size());
  for (size_t i = 0; i < ends.size(); ++i) {
    Node& n = nodes_[ends[i].first];
    if (n.tokens_end == n.tokens_begin) n.tokens_begin = n.tokens_end = static_cast<uint32_t>(token_ids_.size());
    token_ids_.push_back(ends[i].second);
    n.tokens_end = static_cast<uint32_t>(token_ids_.size());
  }
}

namespace {

// UTF-8 decoding carried across bytes (and across tokens).
struct Utf8 {
  uint32_t acc = 0;
  uint8_t need = 0;   // continuation bytes still expected
  uint8_t total = 0;  // continuation bytes of the current sequence

  // Feeds one byte; returns 1 when a code point completed (in acc), 0 when
  // more bytes are needed, -1 for invalid UTF-8 (including overlong forms,
  // surrogates and values past U+10FFFF, which would smuggle a character in
  // through byte tokens).
  int feed(uint8_t b) {
    if (need == 0) {
      if (b < 0x80) {
        acc = b;
        return 1;
      }
      if ((b >> 5) == 6) {
        acc = b & 0x1F;
        need = total = 1;
      } else if ((b >> 4) == 14) {
        acc = b & 0x0F;
        need = total = 2;
      } else if ((b >> 3) == 30) {
        acc = b & 0x07;
        need = total = 3;
      } else {
        return -1;
      }
      return possible() ? 0 : -1;
    }
    if ((b & 0xC0) != 0x80) return -1;
    acc = (acc << 6) | (b & 0x3F);
    if (--need > 0) return possible() ? 0 : -1;
    const bool ok = acc >= min_value() && acc <= 0x10FFFF && !(acc >= 0xD800 && acc <= 0xDFFF);
    return ok ? 1 : -1;
  }
  uint32_t min_value() const { return total == 1 ? 0x80 : total == 2 ? 0x800 : 0x10000; }
  // Whether the pending sequence can still become a valid code point.
  bool possible() const {
    const auto [lo, hi] = range();
    return lo <= hi;
  }
  // The code points a pending sequence can still become.
  std::pair<uint32_t, uint32_t> range() const {
    const uint32_t lo = acc << (6 * need);
    return {std::max(lo, min_value()), std::min(lo | ((1u << (6 * need)) - 1), 0x10FFFFu)};
  }
};

struct FrameKey {
  const GrammarElem* elem;
  int32_t parent;
  bool operator==(const FrameKey& o) const { return elem == o.elem && parent == o.parent; }
};
struct FrameKeyHash {
  size_t operator()(const FrameKey& k) const {
    return std::hash<const void*>()(k.elem) * 31u + std::hash<int32_t>()(k.parent);
  }
};
struct SetKeyHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    size_t h = v.size();
    for (int32_t x : v) h = h * 1000003u ^ static_cast<size_t>(x);
    return h;
  }
};

constexpr size_t kMaxCachedMasks = 64;

}  // namespace

struct GrammarState::Impl {
  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const GrammarVocab> vocab;

  // Frame arena.
  std::vector<FrameKey> frames;
  std::unordered_map<FrameKey, int32_t, FrameKeyHash> intern;
  std::vector<int32_t> expand_begin, expand_end;  // memo into pool; begin < 0: not computed
  std::vector<int32_t> after_begin, after_end;
  std::vector<int32_t> pool;

  // Current state.
  std::vector<int32_t> set;  // sorted, unique
  Utf8 utf8;

  // Mask cache: key = set + {acc, need}.
  std::unordered_map<std::vector<int32_t>, std::vector<uint64_t>, SetKeyHash> masks;
  std::vector<std::vector<int32_t>> mask_order;

  std::vector<float> eog_keep;
  // Walk buffers, one set per trie depth.
  std::vector<std::vector<int32_t>> level;

  int32_t frame(const GrammarElem* e, int32_t parent) {
    const FrameKey k{e, parent};
    auto it = intern.find(k);
    if (it != intern.end()) return it->second;
    const int32_t id = static_cast<int32_t>(frames.size());
    frames.push_back(k);
    intern.emplace(k, id);
    expand_begin.push_back(-1);
    expand_end.push_back(-1);
    after_begin.push_back(-1);
    after_end.push_back(-1);
    return id;
  }

  // The frame for position e on top of parent, with finished alternatives popped.
  int32_t push(const GrammarElem* e, int32_t parent) { return e->kind == GrammarElem::end ? parent : frame(e, parent); }

  void expand_into(int32_t id, std::vector<int32_t>& out, int depth) {
    if (depth > 10000) fail("grammar: rule nesting deeper than 10000 while expanding");
    if (id < 0) {
      out.push_back(-1);
      return;
    }
    if (expand_begin[id] >= 0) {
      out.insert(out.end(), pool.begin() + expand_begin[id], pool.begin() + expand_end[id]);
      return;
    }
    const FrameKey f = frames[id];
    std::vector<int32_t> local;
    if (f.elem->kind == GrammarElem::chars) {
      local.push_back(id);
    } else {  // a rule reference (end never reaches a frame: push() pops it)
      const int32_t cont = push(f.elem + 1, f.parent);
      for (const auto& alt : g->alternatives(f.elem->index)) expand_into(push(alt.data(), cont), local, depth + 1);
      std::sort(local.begin(), local.end());
      local.erase(std::unique(local.begin(), local.end()), local.end());
    }
    expand_begin[id] = static_cast<int32_t>(pool.size());
    pool.insert(pool.end(), local.begin(), local.end());
    expand_end[id] = static_cast<int32_t>(pool.size());
    out.insert(out.end(), local.begin(), local.end());
  }

  // Stacks after the top class of `id` consumed a code point.
  std::pair<int32_t, int32_t> after(int32_t id) {
    if (after_begin[id] < 0) {
      std::vector<int32_t> local;
      const FrameKey f = frames[id];
      expand_into(push(f.elem + 1, f.parent), local, 0);
      after_begin[id] = static_cast<int32_t>(pool.size());
      pool.insert(pool.end(), local.begin(), local.end());
      after_end[id] = static_cast<int32_t>(pool.size());
    }
    return {after_begin[id], after_end[id]};
  }

  bool top_matches(int32_t id, uint32_t cp) const { return g->char_class(frames[id].elem->index).contains(cp); }

  void advance(const std::vector<int32_t>& in, uint32_t cp, std::vector<int32_t>& out) {
    out.clear();
    for (int32_t id : in) {
      if (id < 0 || !top_matches(id, cp)) continue;
      auto [b, e] = after(id);
      out.insert(out.end(), pool.begin() + b, pool.begin() + e);
    }
    if (out.size() > 1) {
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
  }

  bool partial_possible(const std::vector<int32_t>& in, const Utf8& u) const {
    const auto [lo, hi] = u.range();
    for (int32_t id : in) {
      if (id >= 0 && g->char_class(frames[id].elem->index).intersects(lo, hi)) return true;
    }
    return false;
  }

  // Advances (set, utf8) over bytes; false if they cannot continue.
  bool advance_bytes(std::string_view bytes, std::vector<int32_t>& s, Utf8& u) {
    std::vector<int32_t> tmp;
    for (char ch : bytes) {
      const int r = u.feed(static_cast<uint8_t>(ch));
      if (r < 0) return false;
      if (r == 1) {
        advance(s, u.acc, tmp);
        s.swap(tmp);
        if (s.empty()) return false;
      }
    }
    if (u.need > 0 && !partial_possible(s, u)) return false;
    return true;
  }

  void walk(uint32_t node, size_t depth, const Utf8& u, std::vector<uint64_t>& bits) {
    const auto& nodes = vocab->nodes();
    const auto& toks = vocab->node_tokens();
    for (uint32_t c = nodes[node].first_child; c != 0; c = nodes[c].next_sibling) {
      const GrammarVocab::Node& n = nodes[c];
      Utf8 v = u;
      const int r = v.feed(n.byte);
      if (r < 0) continue;
      const std::vector<int32_t>* next = &level[depth];
      if (r == 1) {
        advance(level[depth], v.acc, level[depth + 1]);
        if (level[depth + 1].empty()) continue;
        next = &level[depth + 1];
      } else if (!partial_possible(level[depth], v)) {
        continue;
      }
      for (uint32_t i = n.tokens_begin; i < n.tokens_end; ++i) {
        const int32_t t = toks[i];
        bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
      }
      if (n.first_child != 0) {
        if (next != &level[depth + 1]) level[depth + 1] = *next;
        walk(c, depth + 1, v, bits);
      }
    }
  }

  const std::vector<uint64_t>& mask_bits() {
    std::vector<int32_t> key = set;
    key.push_back(static_cast<int32_t>(utf8.acc));
    key.push_back(utf8.need);
    auto it = masks.find(key);
    if (it != masks.end()) return it->second;
    if (masks.size() >= kMaxCachedMasks) {
      masks.erase(mask_order.front());
      mask_order.erase(mask_order.begin());
    }
    std::vector<uint64_t> bits((static_cast<size_t>(vocab->n_vocab()) + 63) / 64, 0);
    if (level.size() < vocab->max_piece_bytes() + 2) level.resize(vocab->max_piece_bytes() + 2);
    level[0] = set;
    walk(0, 0, utf8, bits);
    mask_order.push_back(key);
    return masks.emplace(std::move(key), std::move(bits)).first->second;
  }

  bool can_end() const { return utf8.need == 0 && !set.empty() && set.front() == -1; }
};

GrammarState::GrammarState(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab)
    : p_(std::make_unique<Impl>()) {
  if (!grammar) fail("grammar: no grammar given");
  p_->g = std::move(grammar);
  p_->vocab = std::move(vocab);
  reset();
}

void GrammarState::reset() {
  p_->set.clear();
  p_->utf8 = Utf8{};
  const auto& alts = p_->g->alternatives(p_->g->root());
  for (const auto& alt : alts) p_->expand_into(p_->push(alt.data(), -1), p_->set, 0);
  std::sort(p_->set.begin(), p_->set.end());
  p_->set.erase(std::unique(p_->set.begin(), p_->set.end()), p_->set.end());
}

size_t GrammarState::mask_logits(float* logits) {
  if (!p_->vocab) fail("grammar: a token mask needs a vocabulary");
  const int32_t n = p_->vocab->n_vocab();
  const auto& bits = p_->mask_bits();
  const bool end_ok = p_->can_end();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // End-of-generation tokens are not in the trie: allowed exactly when the grammar can end.
  const auto& eog = p_->vocab->eog_tokens();
  std::vector<float>& eog_keep = p_->eog_keep;
  eog_keep.resize(eog.size());
  for (size_t i = 0; i < eog.size(); ++i) eog_keep[i] = logits[eog[i]];
  size_t count = 0;
  for (int32_t w = 0; w * 64 < n; ++w) {
    uint64_t word = bits[static_cast<size_t>(w)];
    const int32_t base = w * 64;
    const int32_t lim = std::min<int32_t>(64, n - base);
    if (word == 0) {
      for (int32_t i = 0; i < lim; ++i) logits[base + i] = neg_inf;
      continue;
    }
    count += static_cast<size_t>(__builtin_popcountll(word));
    for (int32_t i = 0; i < lim; ++i) {
      if (!((word >> i) & 1)) logits[base + i] = neg_inf;
    }
  }
  if (end_ok) {
    for (size_t i = 0; i < eog.size(); ++i) logits[eog[i]] = eog_keep[i];
    count += eog.size();
  }
  return count;
}

GrammarState::~GrammarState() = default;
GrammarState::GrammarState(GrammarState&&) noexcept = default;
GrammarState& GrammarState::operator=(GrammarState&&) noexcept = default;

size_t GrammarState::allowed(std::vector<uint8_t>& mask) {
  if (!p_->vocab) fail("grammar: a token mask needs a vocabulary");
  const int32_t n = p_->vocab->n_vocab();
  mask.assign(static_cast<size_t>(n), 0);
  const auto& bits = p_->mask_bits();
  size_t count = 0;
  for (int32_t t = 0; t < n; ++t) {
    const uint8_t on = static_cast<uint8_t>((bits[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1);
    mask[t] = on;
    count += on;
  }
  if (p_->can_end()) {
    for (int32_t t : p_->vocab->eog_tokens()) {
      if (!mask[t]) ++count;
      mask[t] = 1;
    }
  }
  return count;
}

bool GrammarState::allows(int32_t token) {
  if (!p_->vocab || token < 0 || token >= p_->vocab->n_vocab()) return false;
  if (p_->vocab->is_eog(token)) return p_->can_end();
  const std::string& piece = p_->vocab->piece(token);
  if (piece.empty()) return false;
  std::vector<int32_t> s = p_->set;
  Utf8 u = p_->utf8;
  return p_->advance_bytes(piece, s, u);
}

void GrammarState::accept(int32_t token) {
  if (!p_->vocab || token < 0 || token >= p_->vocab->n_vocab()) {
    fail("grammar: token {} is outside the vocabulary", token);
  }
  if (p_->vocab->is_eog(token)) {
    if (!p_->can_end()) fail("grammar: end of generation before the grammar is complete");
    return;
  }
  if (!accept_text(p_->vocab->piece(token)) || p_->vocab->piece(token).empty()) {
    fail("grammar: token {} ('{}') does not continue the grammar", token, p_->vocab->piece(token));
  }
}

bool GrammarState::accept_text(std::string_view text) {
  std::vector<int32_t> s = p_->set;
  Utf8 u = p_->utf8;
  if (!p_->advance_bytes(text, s, u)) return false;
  p_->set = std::move(s);
  p_->utf8 = u;
  return true;
}

bool GrammarState::can_end() const { return p_->can_end(); }
bool GrammarState::finished() const { return p_->can_end() && p_->set.size() == 1; }

bool grammar_matches(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  GrammarState st(grammar, nullptr);
  return st.accept_text(text) && st.can_end();
}

}  // namespace opal
