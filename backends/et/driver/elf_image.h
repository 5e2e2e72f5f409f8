// Kernel images: the facts the drivers need from an ET kernel ELF (RV64,
// little-endian, statically linked at its load address), checked before the
// image reaches a device so that a bad image is an error naming the kernel,
// not an emulator failure.
#pragma once
#include <cstdint>
#include <optional>
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

// The value of symbol `symbol` in the image's symbol table, or nullopt.
std::optional<uint64_t> elf_symbol(std::span<const uint8_t> image, std::string_view symbol);

// The bytes at [vaddr, vaddr + n) of the image's loaded contents, or an empty
// vector when they do not lie in one segment's file bytes.
std::vector<uint8_t> elf_read(std::span<const uint8_t> image, uint64_t vaddr, uint64_t n);

}  // namespace opal::et
