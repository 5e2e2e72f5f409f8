// Internal state of opal::Vocab shared by the per-algorithm files (spm.cpp,
// bpe.cpp, wpm.cpp, vocab_tokenize.cpp). Not part of the public API.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_pretokenize.h"
#include "tokenizer/vocab.h"

namespace opal {

// Transparent hashing so lookups by string_view need no temporary string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// Byte-level BPE merges over interned symbol strings: every token text and every
// merge part gets a symbol id, and a merge is (left sym, right sym) -> (rank, result sym).
struct BpeMerges {
  std::vector<std::string> sym_text;  // symbol id -> text
  std::vector<int32_t> sym_token;     // symbol id -> token id or -1
  TokenMap sym_of_text;               // text -> symbol id
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;  // key: (uint64(left) << 32) | right
  int32_t byte_sym[256];                       // symbol of each GPT-2 byte char, or -1

  static uint64_t key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  int32_t intern(std::string_view text);
};

// RWKV world tokenizer (rwkv.cpp): a byte trie over the unescaped token texts.
struct RwkvTrie {
  struct Node {
    int32_t value = -1;                                 // token id ending here, or -1
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  std::vector<Node> nodes;                          // nodes[0] is the root
  int32_t child(int32_t node, uint8_t byte) const;  // -1 if none
  void insert(std::string_view bytes, int32_t id);
};
// A token text written as a Python bytes literal without b'' -> its raw bytes.
std::string rwkv_unescape(std::string_view escaped);

struct Vocab::Impl {
  VocabType type = VocabType::Spm;
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre

  std::vector<TokenData> tokens;
  TokenMap token_to_id;
  int max_token_len = 0;

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1, nl = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;

  bool add_space_prefix = false;
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;
  bool ignore_merges = false;
  bool clean_spaces = false;
  bool escape_whitespaces = true;
  // Gemma 4 ("gemma4"): BPE over raw UTF-8 characters (no GPT-2 byte mapping), spaces as "▁", symbols
  // without a token fall back to <0xXX> byte tokens, a newline run that is a token is emitted whole.
  bool bpe_raw_utf8 = false;
  bool wpm_lowercase = true;
  bool wpm_strip_accents = true;

  std::set<int32_t> eog;
  std::vector<int32_t> special_tokens;   // control/user-defined/unknown, longest text first
  std::vector<std::string> piece_cache;  // token_to_piece(id, special = true)

  // SPM: ASCII characters that occur in no token longer than one character, so no
  // merge can involve them (the text is cut around them; see spm.cpp).
  bool spm_isolated[128] = {};

  BpeMerges bpe;
  RwkvTrie rwkv_trie;                   // RWKV: the trie of rwkv_bytes
  std::vector<std::string> rwkv_bytes;  // RWKV: each token's unescaped bytes
  std::unique_ptr<PreTokenizer> pretokenizer;

  int32_t text_to_token(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  void check_id(int32_t id, const char* what) const;
  std::string compute_piece(int32_t id, bool special) const;

  // Per-algorithm tokenizers: append the tokens of one raw text fragment.
  void tokenize_spm(std::string_view text, std::vector<int32_t>& out) const;
  void merge_spm(std::string_view text, std::vector<int32_t>& out) const;
  void tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void tokenize_wpm(std::string_view text, std::vector<int32_t>& out) const;
  void tokenize_rwkv(std::string_view text, std::vector<int32_t>& out) const;
  void build_rwkv();
  int32_t byte_to_token_spm(uint8_t b) const;
};

}  // namespace opal
