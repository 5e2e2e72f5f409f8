// See grammar_vocab.h.
#include "runtime/grammar_vocab.h"

#include <string>
#include <vector>

namespace opal {

std::shared_ptr<const GrammarVocab> make_grammar_vocab(const Vocab& vocab) {
  const int32_t n = vocab.n_tokens();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) pieces[t] = vocab.token_to_piece(t, false);
  return std::make_shared<const GrammarVocab>(pieces, vocab.eog_ids());
}

}  // namespace opal
