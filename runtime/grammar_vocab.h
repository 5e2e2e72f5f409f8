// The vocabulary as the grammar matcher sees it (sampling/grammar.h): each
// token's text as generation emits it (Vocab::token_to_piece without special
// tokens rendered, so control tokens are empty and never allowed) and the
// end-of-generation ids. Build once per model; it is immutable and shared.
#pragma once
#include <memory>

#include "sampling/grammar.h"
#include "tokenizer/vocab.h"

namespace opal {

std::shared_ptr<const GrammarVocab> make_grammar_vocab(const Vocab& vocab);

}  // namespace opal
