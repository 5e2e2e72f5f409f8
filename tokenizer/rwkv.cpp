// The RWKV "world" tokenizer (tokenizer.ggml.model = "rwkv"), as llama.cpp's
// llm_tokenizer_rwkv.
//
// Token texts are stored as Python bytes literals without the b'' quotes:
// "\xNN" (lowercase hex), "\t", "\n", "\r", "\\", "\'" and plain characters.
// rwkv_unescape() turns them back into raw bytes. Every token's bytes go into
// a byte trie (children kept as sorted (byte, node) lists, so a 65k-token
// vocabulary stays small). Tokenization is greedy longest match over the raw
// UTF-8 bytes of the text: from the current byte, walk the trie as far as it
// goes and emit the longest token seen on the way; no normalization, no space
// prefix. Ids 1-256 are the single bytes, so every byte string tokenizes; a
// byte without a token (a malformed vocabulary) becomes the unknown token, or
// is skipped when there is none, as llama.cpp.
#include <algorithm>

#include "tokenizer/vocab_impl.h"

namespace opal {

std::string rwkv_unescape(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  bool escaping = false;
  int hex_left = 0;
  uint8_t hex = 0;
  for (char c : escaped) {
    if (hex_left > 0) {
      const uint8_t d = c >= 'a' ? uint8_t(c - 'a' + 10) : c >= 'A' ? uint8_t(c - 'A' + 10) : uint8_t(c - '0');
      hex = uint8_t((hex << 4) + d);
      if (--hex_left == 0) {
        out.push_back(char(hex));
        hex = 0;
      }
      continue;
    }
    if (escaping) {
      escaping = false;
      switch (c) {
        case 't': out.push_back('\t'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 'x': hex_left = 2; break;
        default: out.push_back(c); break;
      }
      continue;
    }
    if (c == '\\') {
      escaping = true;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

int32_t RwkvTrie::child(int32_t node, uint8_t byte) const {
  const auto& ch = nodes[size_t(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), byte, [](const auto& e, uint8_t b) { return e.first < b; });
  return it != ch.end() && it->first == byte ? it->second : -1;
}

void RwkvTrie::insert(std::string_view bytes, int32_t id) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t node = 0;
  for (char c : bytes) {
    const uint8_t b = uint8_t(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(nodes.size());
      nodes.emplace_back();
      auto& ch = nodes[size_t(node)].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& e, uint8_t x) { return e.first < x; });
      ch.insert(it, {b, next});
    }
    node = next;
  }
  if (node != 0 && nodes[size_t(node)].value < 0) nodes[size_t(node)].value = id;  // first id wins, as llama.cpp
}

void Vocab::Impl::build_rwkv() {
  rwkv_bytes.resize(tokens.size());
  rwkv_trie.nodes.clear();
  rwkv_trie.nodes.emplace_back();
  for (size_t id = 0; id < tokens.size(); ++id) {
    rwkv_bytes[id] = rwkv_unescape(tokens[id].text);
    rwkv_trie.insert(rwkv_bytes[id], int32_t(id));
  }
}

void Vocab::Impl::tokenize_rwkv(std::string_view text, std::vector<int32_t>& out) const {
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t node = rwkv_trie.child(0, uint8_t(text[pos]));
    if (node < 0) {  // no token starts with this byte
      if (unk >= 0) out.push_back(unk);
      ++pos;
      continue;
    }
    int32_t best = -1;
    size_t best_end = pos + 1, p = pos;
    while (node >= 0) {
      if (rwkv_trie.nodes[size_t(node)].value >= 0) {
        best = rwkv_trie.nodes[size_t(node)].value;
        best_end = p + 1;
      }
      if (++p >= text.size()) break;
      node = rwkv_trie.child(node, uint8_t(text[p]));
    }
    if (best >= 0) out.push_back(best);
    else if (unk >= 0) out.push_back(unk);
    pos = best_end;
  }
}

}  // namespace opal
