// `--isa NAME` for every subcommand that loads a model: chooses the CPU
// matmul kernels (scalar, avx2, avx512, neon; backends/cpu/kernels/isa.h)
// before the model is loaded. Without it the best ISA the CPU has is used
// (or $OPAL_ISA when set). An ISA the CPU lacks is an error naming the ones it has.
// With it, `--batch-order llama|lanes` (alias `--q8-0-order`;
// cpu::set_batch_order; the same as $OPAL_BATCH_ORDER, which it overrides) and
// `--decode-prefetch auto|on|off` (cpu::set_decode_prefetch; $OPAL_DECODE_PREFETCH).
#pragma once
#include <CLI/CLI.hpp>

namespace opal::tools {

// Adds --isa, --batch-order (--q8-0-order) and --decode-prefetch to a subcommand; the selection happens while parsing.
void add_isa_option(CLI::App* sub);

}  // namespace opal::tools
