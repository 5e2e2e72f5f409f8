// Opal's tokenizer: a vocabulary read from GGUF metadata (tokenizer.ggml.*) that
// tokenizes and detokenizes exactly as llama.cpp does.
//
// Supported `tokenizer.ggml.model` values:
//   "llama"  SentencePiece BPE (scores, byte fallback <0xXX>, ▁ for spaces, space prefix)
//   "gpt2"   byte-level BPE (merges ranks, GPT-2 byte<->unicode map) with the
//            pre-tokenizer chosen by `tokenizer.ggml.pre`
//   "bert"   WordPiece (lowercasing, accent stripping, ▁-prefixed word starts)
//   "rwkv"   RWKV world: greedy longest match over raw bytes (escaped token texts)
//   "none" / "no_vocab": a vocabulary without tokens (tokenize() throws)
//
// Special tokens: control, user-defined and unknown tokens are split out of the
// text before the tokenizer runs (longest text first). With parse_special == false
// only user-defined tokens are split out, as in llama.cpp.
//
// A Vocab is immutable after from_gguf() and cheap to copy (shared state); all
// const methods are safe to call from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace opal {

namespace gguf {
class File;
}

// Per-token attributes (bit flags), numbered as llama.cpp's llama_token_attr.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

enum class VocabType { None, Spm, Bpe, Wpm, Rwkv };

class Vocab {
 public:
  // Reads the tokenizer from a GGUF file's metadata. Throws opal::Error naming the
  // key when metadata is missing, of the wrong type or inconsistent (unknown model or
  // pre-tokenizer, token/score/type arrays of different lengths, duplicate tokens,
  // BPE without merges, add_bos without a BOS id, BOS/EOS id out of range...).
  static Vocab from_gguf(const gguf::File& file);

  // Text -> token ids. add_special adds BOS/EOS (CLS/SEP for WordPiece) as the
  // vocabulary asks (add_bos()/add_eos()); parse_special turns the text of control
  // tokens (e.g. "<|im_start|>") into their ids. Invalid UTF-8 never throws: SPM
  // falls back to byte tokens, BPE/WPM see U+FFFD for each bad byte, as llama.cpp.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  // The text of one token as it appears in output (▁ -> space, byte tokens -> the
  // byte, GPT-2 byte chars -> bytes). With special == false, control and unknown
  // tokens give "". Throws opal::Error for an id out of range.
  std::string token_to_piece(int32_t id, bool special = true) const;

  // Token ids -> text, as llama.cpp's llama_detokenize: removes the space prefix
  // added by SPM, optionally drops a leading BOS / trailing EOS (remove_special),
  // renders control tokens only when unparse_special, and cleans spaces for
  // vocabularies that ask for it. Throws opal::Error naming an id out of range.
  std::string detokenize(std::span<const int32_t> ids, bool remove_special = false, bool unparse_special = true) const;

  int32_t n_tokens() const;
  // Special ids, -1 if the vocabulary has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t eom() const;
  int32_t unk() const;
  int32_t sep() const;
  int32_t pad() const;
  int32_t mask() const;
  int32_t nl() const;  // the newline token
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;

  bool is_eog(int32_t id) const;      // end of generation (EOS, EOT, EOM, <|im_end|>, ...)
  bool is_control(int32_t id) const;  // false for ids out of range
  bool is_byte(int32_t id) const;
  uint32_t token_attr(int32_t id) const;            // TokenAttr bits; throws for ids out of range
  float token_score(int32_t id) const;              // throws for ids out of range
  const std::string& token_text(int32_t id) const;  // raw vocabulary text; throws for ids out of range
  // The id of a token with exactly this vocabulary text, or -1.
  int32_t find_token(std::string_view text) const;
  std::vector<int32_t> eog_ids() const;

  VocabType type() const;
  std::string type_name() const;          // "SPM", "BPE", "WPM", "RWKV", "no vocab"
  const std::string& model_name() const;  // tokenizer.ggml.model
  const std::string& pre_name() const;    // tokenizer.ggml.pre ("default" when absent)

  struct Impl;

 private:
  explicit Vocab(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace opal
