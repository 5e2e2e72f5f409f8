// SentencePiece BPE as llama.cpp runs it (tokenizer.ggml.model = "llama").
//
// The text (spaces already escaped to U+2581 "▁") is cut into UTF-8 characters
// by their lead bytes. Every adjacent pair whose concatenation is a token enters a
// max-heap keyed by that token's score (ties: leftmost pair). The best pair is
// merged, stale entries (a side already merged) are skipped, and the new
// neighbours are pushed. A final piece that is not a token is emitted as byte
// tokens <0xXX> (byte fallback).
//
// Long texts: a character that occurs in no multi-character token (e.g. "\n" in
// Llama-2's vocabulary, see Vocab::Impl::spm_isolated) can never be part of a merge,
// so the text is cut around it and each part merged on its own. Merges on either
// side of such a cut never interact, so the result is the same as one merge run
// over the whole text, but the heap stays small.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_impl.h"

namespace opal {
namespace {

struct Piece {
  size_t start, n;  // bytes of the text
  int32_t prev, next;
};

struct Bigram {
  float score;
  int32_t left, right;
  size_t size;
  bool operator<(const Bigram& o) const {  // priority_queue pops the largest
    return score != o.score ? score < o.score : left > o.left;
  }
};

}  // namespace

int32_t Vocab::Impl::byte_to_token_spm(uint8_t b) const {
  static const char* hex = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  int32_t id = text_to_token(std::string_view(buf, 6));
  if (id >= 0) return id;
  const char raw = char(b);
  id = text_to_token(std::string_view(&raw, 1));
  return id >= 0 ? id : unk;
}

void Vocab::Impl::tokenize_spm(std::string_view text, std::vector<int32_t>& out) const {
  // Cut after/before isolated single-byte characters (at character boundaries).
  size_t seg_start = 0;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(unicode::utf8_len(text[off]), text.size() - off);
    if (n == 1 && uint8_t(text[off]) < 0x80 && spm_isolated[uint8_t(text[off])]) {
      if (off > seg_start) merge_spm(text.substr(seg_start, off - seg_start), out);
      merge_spm(text.substr(off, 1), out);
      seg_start = off + 1;
    }
    off += n;
  }
  if (seg_start < text.size()) merge_spm(text.substr(seg_start), out);
}

void Vocab::Impl::merge_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Piece> pieces;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(unicode::utf8_len(text[off]), text.size() - off);
    const int32_t idx = int32_t(pieces.size());
    pieces.push_back({off, n, idx - 1, off + n == text.size() ? -1 : idx + 1});
    off += n;
  }
  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const size_t size = pieces[l].n + pieces[r].n;
    const int32_t id = text_to_token(text.substr(pieces[l].start, size));
    if (id < 0) return;
    queue.push({tokens[id].score, l, r, size});
  };
  for (int32_t i = 1; i < int32_t(pieces.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Piece& L = pieces[b.left];
    Piece& R = pieces[b.right];
    if (L.n == 0 || R.n == 0 || L.n + R.n != b.size) continue;
    L.n += R.n;
    R.n = 0;
    L.next = R.next;
    if (R.next >= 0) pieces[R.next].prev = b.left;
    try_pair(L.prev, b.left);
    try_pair(b.left, L.next);
  }
  if (pieces.empty()) return;
  for (int32_t i = 0; i >= 0; i = pieces[i].next) {
    const Piece& p = pieces[i];
    const int32_t id = text_to_token(text.substr(p.start, p.n));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t j = 0; j < p.n; ++j) {
      const int32_t t = byte_to_token_spm(uint8_t(text[p.start + j]));
      if (t >= 0) out.push_back(t);
    }
  }
}

}  // namespace opal
