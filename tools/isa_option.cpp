#include "tools/isa_option.h"

#include "backends/cpu/kernels/isa.h"

namespace opal::tools {

void add_isa_option(CLI::App* sub) {
  sub->add_option_function<std::string>(
         "--isa", [](const std::string& name) { cpu::set_isa(cpu::parse_isa(name)); },
         "CPU kernel ISA: scalar, avx2, avx512, neon (default: the best this CPU has)")
      ->type_name("ISA");
}

}  // namespace opal::tools
