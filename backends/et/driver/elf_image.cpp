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

std::optional<uint64_t> elf_symbol(std::span<const uint8_t> image, std::string_view symbol) {
  if (image.size() < 64) return std::nullopt;
  uint64_t shoff = get<uint64_t>(image, 40);
  uint16_t shentsize = get<uint16_t>(image, 58), shnum = get<uint16_t>(image, 60);
  if (shentsize < 64 || shoff + uint64_t(shentsize) * shnum > image.size()) return std::nullopt;
  for (unsigned i = 0; i < shnum; i++) {
    uint64_t sh = shoff + uint64_t(i) * shentsize;
    if (get<uint32_t>(image, sh + 4) != 2) continue;  // SHT_SYMTAB
    uint64_t off = get<uint64_t>(image, sh + 24), size = get<uint64_t>(image, sh + 32);
    uint32_t link = get<uint32_t>(image, sh + 40);
    if (link >= shnum || off + size > image.size()) return std::nullopt;
    uint64_t str_sh = shoff + uint64_t(link) * shentsize;
    uint64_t str_off = get<uint64_t>(image, str_sh + 24), str_size = get<uint64_t>(image, str_sh + 32);
    if (str_off + str_size > image.size()) return std::nullopt;
    for (uint64_t e = off; e + 24 <= off + size; e += 24) {
      uint32_t name = get<uint32_t>(image, e);
      if (name >= str_size) continue;
      const char* p = reinterpret_cast<const char*>(image.data() + str_off + name);
      size_t len = strnlen(p, str_size - name);
      if (std::string_view(p, len) == symbol) return get<uint64_t>(image, e + 8);
    }
  }
  return std::nullopt;
}

std::vector<uint8_t> elf_read(std::span<const uint8_t> image, uint64_t vaddr, uint64_t n) {
  ElfInfo info = parse_elf("image", image);
  for (const ElfSegment& s : info.loads)
    if (vaddr >= s.vaddr && vaddr + n <= s.vaddr + s.file_size) {
      const uint8_t* p = image.data() + s.file_offset + (vaddr - s.vaddr);
      return std::vector<uint8_t>(p, p + n);
    }
  return {};
}

}  // namespace opal::et
