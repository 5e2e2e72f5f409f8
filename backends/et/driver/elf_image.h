// Kernel images: the facts the drivers need from an ET kernel ELF (RV64,
// little-endian, statically linked at its load address), checked before the
// image reaches a device so that a bad image is an error naming the kernel,
// not an emulator failure.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace opal::et {

struct ElfSegment {
  uint64_t vaddr = 0, file_offset = 0, file_size = 0, mem_size = 0;
};

struct ElfInfo {
  uint64_t entry = 0;
  std::vector<ElfSegment> loads;  // PT_LOAD segments
};

// Parses an ELF64 RISC-V executable; throws opal::Error naming `name` and
// what is wrong (not ELF64, not RISC-V, truncated, a segment past the end, a
// PT_RISCV_ATTRIBUTES segment: sysemu's loader would take it for PT_LOAD).
ElfInfo parse_elf(std::string_view name, std::span<const uint8_t> image);

}  // namespace opal::et
