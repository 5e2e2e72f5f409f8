#include "tools/isa_option.h"

#include "backends/cpu/kernels/isa.h"
#include "backends/cpu/kernels/matmul_kernels.h"

namespace opal::tools {

void add_isa_option(CLI::App* sub) {
  sub->add_option_function<std::string>(
         "--isa", [](const std::string& name) { cpu::set_isa(cpu::parse_isa(name)); },
         "CPU kernel ISA: scalar, avx2, avx2-vnni (AVX2 + AVX-VNNI), avx512, neon (default: the best this CPU has)")
      ->type_name("ISA");
  const auto set_order = [](const std::string& name) { cpu::set_batch_order(cpu::parse_batch_order(name)); };
  sub->add_option_function<std::string>(
         "--batch-order", set_order,
         "Summation order of Q8_0 and Q5_0 prompt batches (over 16 tokens) on the CPU, and of every Q5_0 matmul "
         "and the Q4_K decode under avx2 / avx2-vnni: auto (default: lanes for Q5_0 and Q4_K, llama for Q8_0), "
         "llama (llama.cpp's, bit-identical with it) or lanes (weight rows in the SIMD lanes, each block summed "
         "exactly: faster; logits close to llama.cpp's but not bit-identical). Alias: $OPAL_BATCH_ORDER")
      ->type_name("ORDER");
  sub->add_option_function<std::string>("--q8-0-order", set_order, "The older name of --batch-order")
      ->type_name("ORDER");
  sub->add_option_function<std::string>(
         "--decode-prefetch", [](const std::string& v) { cpu::set_decode_prefetch(cpu::parse_decode_prefetch(v)); },
         "Software prefetch of the x86 decode's weights: auto (default: off on AMD's AVX-512 cores, Zen 4 / Zen 5, "
         "on everywhere else), on or off. Alias: $OPAL_DECODE_PREFETCH")
      ->type_name("WHEN");
}

}  // namespace opal::tools
