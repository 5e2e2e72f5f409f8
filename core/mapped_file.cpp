#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace opal {

LoadMode load_mode_from_name(const std::string& name) {
  if (name == "mmap") return LoadMode::Mmap;
  if (name == "populate") return LoadMode::Populate;
  if (name == "read" || name == "none") return LoadMode::Read;
  if (name == "lock" || name == "mlock") return LoadMode::Lock;
  fail("unknown load mode '{}' (expected mmap, populate, read or lock)", name);
}

const char* load_mode_name(LoadMode m) {
  switch (m) {
    case LoadMode::Mmap: return "mmap";
    case LoadMode::Populate: return "populate";
    case LoadMode::Read: return "read";
    case LoadMode::Lock: return "lock";
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
  if (mode == LoadMode::Read) {
    f->owned_.resize(f->size_);
    uint64_t done = 0;
    while (done < f->size_) {
      ssize_t n = ::pread(fd, f->owned_.data() + done, f->size_ - done, off_t(done));
      if (n <= 0) {
        ::close(fd);
        fail("{}: read failed at byte {}: {}", path, done, n < 0 ? std::strerror(errno) : "unexpected end of file");
      }
      done += uint64_t(n);
    }
    ::close(fd);
    f->data_ = f->owned_.data();
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
  if (map_) ::munmap(map_, size_);
}

}  // namespace opal
