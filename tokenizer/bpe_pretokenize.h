// Pre-tokenization for byte-level BPE: the list of regular expressions that
// llama.cpp applies for each `tokenizer.ggml.pre`, and the splitter that runs them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace opal {

struct PreTokenizerConfig {
  std::vector<std::string> regexes;
  bool clean_spaces = true;    // detokenize removes spaces before punctuation
  bool ignore_merges = false;  // a word that is a whole token is emitted directly
  bool add_bos = false;        // default of add_bos before the GGUF key overrides it
  bool add_sep = false;
  bool no_bos = false;  // the pre-tokenizer disables the BOS id (chatglm)
};

// Throws opal::Error for an unknown pre-tokenizer name. "" means "default".
PreTokenizerConfig pre_tokenizer_config(std::string_view pre);

// Splits text into words with a sequence of regexes; each regex splits every piece
// left by the previous one into matches and the gaps between them. The GPT-2 and
// Llama-3 expressions run as hand-written scanners, all others through PCRE2 (JIT):
// expressions with \p{..} classes match on a "collapsed" text where each non-ASCII
// code point is replaced by one byte standing for its class (letter, number,
// punctuation, mark, symbol, other; whitespace becomes \v), the others match the
// UTF-8 text with non-ASCII whitespace replaced by \v. Thread-safe.
class PreTokenizer {
 public:
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words (UTF-8; invalid input bytes became U+FFFD) to `words`.
  void split(std::string_view text, std::vector<std::string>& words) const;

  struct Step;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
  bool need_collapsed_ = false;
  bool need_wide_ = false;
};

}  // namespace opal
