// llama.cpp spells many options with one dash and several letters (`-ub 256`,
// `-ctk f32`, `-np 4`, `-ngl 99`, `-pg 512,128`). CLI11 reads `-ub` as the
// short flags -u -b, so before parsing, main() rewrites each such word to its
// double-dash form (`--ub`), which every subcommand declares as an alias of
// its long name (`--ub,--ubatch-size`). Only the names below are rewritten,
// and only as whole words or as `-name=value`.
#pragma once
#include <string>
#include <vector>

namespace opal::tools {

// The llama.cpp multi-letter single-dash option names (without the dash).
const std::vector<std::string>& llama_multi_letter_flags();

// Returns argv with `-ub` → `--ub`, `-ctk=f32` → `--ctk=f32`, etc. The words
// after `--` are left alone, as are values that follow an option.
std::vector<std::string> map_llama_flags(int argc, const char* const* argv);

}  // namespace opal::tools
