#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace opal {
namespace {
// MADV_POPULATE_WRITE (Linux 5.14); older C libraries lack the name.
#ifdef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kMadvPopulateWrite = 23;
#endif
}  // namespace

LoadMode load_mode_from_name(const std::string& name) {
  if (name == "mmap") return LoadMode::Mmap;
  if (name == "populate") return LoadMode::Populate;
  if (name == "read" || name == "none") return LoadMode::Read;
  if (name == "lock" || name == "mlock") return LoadMode::Lock;
  if (name == "huge") return LoadMode::Huge;
  fail("unknown load mode '{}' (expected mmap, populate, read (or none), lock (or mlock) or huge)", name);
}

LoadMode default_load_mode() { return LoadMode::Huge; }

const std::vector<LoadMode>& all_load_modes() {
  static const std::vector<LoadMode> modes = {LoadMode::Mmap, LoadMode::Populate, LoadMode::Read, LoadMode::Lock,
                                              LoadMode::Huge};
  return modes;
}

const char* load_mode_name(LoadMode m) {
  switch (m) {
    case LoadMode::Mmap: return "mmap";
    case LoadMode::Populate: return "populate";
    case LoadMode::Read: return "read";
    case LoadMode::Lock: return "lock";
    case LoadMode::Huge: return "huge";
  }
  return "?";
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, LoadMode mode) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = uint64_t(st.st_size);
  f->mode_ = mode;
  if (f->size_ == 0) {
    ::close(fd);
    f->data_ = f->owned_.data();
    return f;
  }
  if (mode == LoadMode::Read || mode == LoadMode::Huge) {
    // Anonymous memory (not std::vector: no zero-fill pass, and Huge needs
    // 2 MiB alignment for transparent huge pages).
    constexpr uint64_t kHuge = 2u << 20;
    const uint64_t extra = mode == LoadMode::Huge ? kHuge : 0;
    const uint64_t bytes = f->size_ + extra;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("{}: cannot allocate {} bytes to read the file into: {}", path, bytes, std::strerror(errno));
    }
    f->map_ = p;
    f->map_bytes_ = bytes;
    uint8_t* dst = static_cast<uint8_t*>(p);
    if (mode == LoadMode::Huge) {
      dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge);
      ::madvise(dst, (f->size_ + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);  // a hint; failure is harmless
    }
    // Fault the memory in from the kernel in one call: on the cloud guests we
    // measure on, first-touch page faults taken one by one from user space
    // cost ~15 s per GiB, populating costs ~1 s (docs/PERF.md). A hint: on
    // kernels without it (< 5.14) the reads below fault the pages in.
    ::madvise(p, bytes, kMadvPopulateWrite);
    uint64_t done = 0;
    while (done < f->size_) {
      const uint64_t chunk = std::min<uint64_t>(f->size_ - done, 64u << 20);
      ssize_t n = ::pread(fd, dst + done, chunk, off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        fail("{}: read failed at byte {}: {}", path, done, n < 0 ? std::strerror(errno) : "unexpected end of file");
      }
      done += uint64_t(n);
    }
    ::close(fd);
    ::mprotect(p, bytes, PROT_READ);  // weights are read-only from here on
    f->data_ = dst;
    return f;
  }
  int flags = MAP_PRIVATE;
  if (mode == LoadMode::Populate || mode == LoadMode::Lock) flags |= MAP_POPULATE;
  void* p = ::mmap(nullptr, f->size_, PROT_READ, flags, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(errno));
  if (mode == LoadMode::Lock && ::mlock(p, f->size_) != 0)
    fmt::print(stderr, "warning: {}: mlock failed ({}); continuing without\n", path, std::strerror(errno));
  f->map_ = p;
  f->map_bytes_ = f->size_;
  f->data_ = static_cast<const uint8_t*>(p);
  return f;
}

std::shared_ptr<MappedFile> MappedFile::borrow(std::span<const uint8_t> bytes, std::string name) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->data_ = bytes.data();
  f->size_ = bytes.size();
  f->path_ = std::move(name);
  return f;
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

}  // namespace opal
