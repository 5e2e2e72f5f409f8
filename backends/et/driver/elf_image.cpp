// ELF64 header and program-header parsing for kernel images (elf_image.h).
#include "backends/et/driver/elf_image.h"

#include <cstring>

#include "core/error.h"

namespace opal::et {
namespace {

template <class T>
T get(std::span<const uint8_t> b, uint64_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

}  // namespace

ElfInfo parse_elf(std::string_view name, std::span<const uint8_t> image) {
  if (image.size() < 64 || std::memcmp(image.data(),
                                       "\x7f"
                                       "ELF",
                                       4) != 0)
    fail("et: kernel image '{}' is not an ELF file ({} bytes)", name, image.size());
  if (image[4] != 2 || image[5] != 1) fail("et: kernel image '{}' is not a little-endian ELF64 file", name);
  if (get<uint16_t>(image, 18) != 243)
    fail("et: kernel image '{}' is not RISC-V (e_machine {})", name, get<uint16_t>(image, 18));
  ElfInfo info;
  info.entry = get<uint64_t>(image, 24);
  uint64_t phoff = get<uint64_t>(image, 32);
  uint16_t phentsize = get<uint16_t>(image, 54), phnum = get<uint16_t>(image, 56);
  if (phentsize < 56 || phoff + uint64_t(phentsize) * phnum > image.size())
    fail("et: kernel image '{}': program headers past the end of the file", name);
  for (unsigned i = 0; i < phnum; i++) {
    uint64_t p = phoff + uint64_t(i) * phentsize;
    uint32_t type = get<uint32_t>(image, p);
    if (type == 0x70000003)
      fail(
          "et: kernel image '{}' has a PT_RISCV_ATTRIBUTES segment (sysemu's loader takes it for PT_LOAD: "
          "drop .riscv.attributes at link time)",
          name);
    if (type != 1) continue;
    ElfSegment s{get<uint64_t>(image, p + 16), get<uint64_t>(image, p + 8), get<uint64_t>(image, p + 32),
                 get<uint64_t>(image, p + 40)};
    if (s.file_offset + s.file_size > image.size() || s.file_size > s.mem_size)
      fail("et: kernel image '{}': segment {} lies past the end of the file", name, i);
    info.loads.push_back(s);
  }
  if (info.loads.empty()) fail("et: kernel image '{}' has no loadable segment", name);
  return info;
}

}  // namespace opal::et
