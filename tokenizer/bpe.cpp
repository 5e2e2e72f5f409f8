// Byte-level BPE (tokenizer.ggml.model = "gpt2").
//
// Each pre-tokenized word is turned into one symbol per byte, each byte written as
// its GPT-2 printable code point. Then, repeatedly, the adjacent pair with the
// lowest merge rank (ties: leftmost) is merged, until no pair has a merge. Symbols
// are interned strings (BpeMerges::sym_text), so a merge lookup is one hash probe on
// two integers. A final symbol that is not a token falls back to the tokens of its
// single bytes, as llama.cpp does.
#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_impl.h"

namespace opal {

int32_t BpeMerges::intern(std::string_view text) {
  auto it = sym_of_text.find(text);
  if (it != sym_of_text.end()) return it->second;
  const int32_t id = int32_t(sym_text.size());
  sym_text.emplace_back(text);
  sym_token.push_back(-1);
  sym_of_text.emplace(std::string(text), id);
  return id;
}

namespace {

struct Symbol {
  int32_t sym;  // interned symbol, -1 if the byte char is unknown to the merges
  int32_t prev, next;
  uint8_t byte;  // the first input byte (for unknown single-byte symbols)
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t left, right;
  int32_t left_sym, right_sym;
  int32_t result;                             // the merged symbol
  bool operator<(const Candidate& o) const {  // the heap's top is the lowest rank, then leftmost
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

void Vocab::Impl::tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string> words;
  pretokenizer->split(text, words);

  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;  // max-heap by Candidate::operator<
  std::string encoded;
  for (const std::string& word : words) {
    if (word.empty()) continue;
    if (ignore_merges) {
      encoded.clear();
      for (unsigned char b : word) encoded += unicode::byte_to_utf8(b);
      const int32_t id = text_to_token(encoded);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    symbols.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      const uint8_t b = uint8_t(word[i]);
      symbols.push_back({bpe.byte_sym[b], int32_t(i) - 1, i + 1 < word.size() ? int32_t(i + 1) : -1, b, true});
    }
    heap.clear();
    auto try_pair = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const int32_t ls = symbols[l].sym, rs = symbols[r].sym;
      if (ls < 0 || rs < 0) return;
      auto it = bpe.merges.find(BpeMerges::key(ls, rs));
      if (it == bpe.merges.end()) return;
      heap.push_back({it->second.rank, l, r, ls, rs, it->second.result});
      std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 1; i < int32_t(symbols.size()); ++i) try_pair(i - 1, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& L = symbols[c.left];
      Symbol& R = symbols[c.right];
      if (!L.alive || !R.alive || L.sym != c.left_sym || R.sym != c.right_sym || L.next != c.right) continue;
      L.sym = c.result;
      R.alive = false;
      L.next = R.next;
      if (R.next >= 0) symbols[R.next].prev = c.left;
      try_pair(L.prev, c.left);
      try_pair(c.left, L.next);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      const int32_t id = s.sym >= 0 ? bpe.sym_token[s.sym] : -1;
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token: each byte of the symbol's (encoded) text on its own, if that is a token.
      const std::string& t = s.sym >= 0 ? bpe.sym_text[s.sym] : unicode::byte_to_utf8(s.byte);
      for (char ch : t) {
        const int32_t b = text_to_token(std::string_view(&ch, 1));
        if (b >= 0) out.push_back(b);
      }
    }
  }
}

}  // namespace opal
