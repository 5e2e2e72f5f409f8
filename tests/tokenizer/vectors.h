// Helpers for the llama.cpp tokenizer vectors in shared/tokenizer-vectors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace opal::test {

struct VectorCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads X.gguf.inp / X.gguf.out (texts split on "\n__ggml_vocab_test__\n",
// one line of ids per text). Fails the test if the counts disagree.
std::vector<VectorCase> read_vectors(const std::string& inp_path, const std::string& out_path);
// Loads a vocab-only GGUF (cached per path for the process).
const Vocab& load_vocab(const std::string& path);
std::string ids_to_string(const std::vector<int32_t>& ids);

}  // namespace opal::test
