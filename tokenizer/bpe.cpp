// Byte-level BPE (tokenizer.ggml.model = "gpt2").
//
// Each pre-tokenized word is turned into one symbol per byte, each byte written as
// its GPT-2 printable code point. Then, repeatedly, the adjacent pair with the
// lowest merge rank (ties: leftmost) is merged, until no pair has a merge. Symbols
// are interned strings (BpeMerges::sym_text), so a merge lookup is one hash probe on
// two integers. A final symbol that is not a token falls back to the tokens of its
// single bytes, as llama.cpp does.
// Gemma 4 (bpe_raw_utf8): the symbols are the word's UTF-8 characters as they
// are (no GPT-2 mapping), a word made of newlines that is itself a token is
// emitted whole, and a final symbol that is not a token becomes the <0xXX>
// byte tokens of its bytes.
#include <fmt/format.h>

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
  std::vector<std::pair<size_t, size_t>> raw_chars;  // bpe_raw_utf8: each symbol's first character in the word
  std::vector<Candidate> heap;                       // max-heap by Candidate::operator<
  std::string encoded;
  auto byte_tokens = [&](std::string_view t) {
    for (char ch : t) {
      const int32_t b = text_to_token(fmt::format("<0x{:02X}>", uint8_t(ch)));
      if (b >= 0) out.push_back(b);
      else if (unk >= 0) out.push_back(unk);
    }
  };
  for (const std::string& word : words) {
    if (word.empty()) continue;
    if (bpe_raw_utf8 && word.find_first_not_of('\n') == std::string::npos) {
      if (const int32_t id = text_to_token(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
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
    raw_chars.clear();
    if (bpe_raw_utf8) {                              // one symbol per UTF-8 character
      std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
      for (size_t i = 0; i < word.size();) {
        const size_t len = std::min(word.size() - i, unicode::utf8_len(word[i]));
        chars.push_back({i, len});
        i += len;
      }
      for (size_t j = 0; j < chars.size(); ++j) {
        auto it = bpe.sym_of_text.find(std::string_view(word).substr(chars[j].first, chars[j].second));
        symbols.push_back({it == bpe.sym_of_text.end() ? -1 : it->second, int32_t(j) - 1,
                           j + 1 < chars.size() ? int32_t(j + 1) : -1, uint8_t(word[chars[j].first]), true});
        raw_chars.push_back(chars[j]);
      }
    } else {
      for (size_t i = 0; i < word.size(); ++i) {
        const uint8_t b = uint8_t(word[i]);
        symbols.push_back({bpe.byte_sym[b], int32_t(i) - 1, i + 1 < word.size() ? int32_t(i + 1) : -1, b, true});
      }
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
      if (bpe_raw_utf8) {  // byte fallback: the <0xXX> tokens of the symbol's bytes
        if (s.sym >= 0) byte_tokens(bpe.sym_text[s.sym]);
        else byte_tokens(std::string_view(word).substr(raw_chars[size_t(i)].first, raw_chars[size_t(i)].second));
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
