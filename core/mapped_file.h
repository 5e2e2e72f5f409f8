// A read-only view of a whole file, loaded in one of several modes.
//
// Why the modes matter (docs/bench.md, docs/PERF.md): on the shared cloud
// machines Opal is measured on, memory left idle for about a minute is paged
// out by the host; file-backed pages of an mmap'd model then come back from
// disk one fault at a time and decode slows down several-fold. Weights read
// into anonymous memory (Read, Huge) do not suffer from it. Huge also asks for
// transparent huge pages (fewer TLB misses when a decode streams the weights).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace opal {

enum class LoadMode {
  Mmap,      // map the file; pages come in on first touch (llama.cpp's default)
  Populate,  // map with MAP_POPULATE: read everything at load, keep the mapping
  Read,      // read into anonymous memory (llama.cpp's --no-mmap / -lm none)
  Lock,      // map, populate and mlock (llama.cpp's --mlock)
  Huge,      // Read into 2 MiB-aligned anonymous memory with MADV_HUGEPAGE
};
// The mode Model::load uses unless told otherwise (measured: docs/PERF.md).
LoadMode default_load_mode();
// Every mode, in a fixed order (for help texts and tests).
const std::vector<LoadMode>& all_load_modes();
LoadMode load_mode_from_name(const std::string& name);
const char* load_mode_name(LoadMode m);

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path, LoadMode mode = LoadMode::Mmap);
  // Wrap caller-owned bytes (no copy; the caller keeps them alive).
  static std::shared_ptr<MappedFile> borrow(std::span<const uint8_t> bytes, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  LoadMode mode() const { return mode_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // mapping to munmap (file or anonymous)
  uint64_t map_bytes_ = 0;
  std::vector<uint8_t> owned_;
  std::string path_;
  LoadMode mode_ = LoadMode::Mmap;
};

}  // namespace opal
