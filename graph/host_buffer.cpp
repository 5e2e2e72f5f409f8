#include "graph/host_buffer.h"

#include <sys/mman.h>

#include "core/error.h"

namespace opal {

// Large buffers (a KV cache sized for a model's whole trained context can be
// gigabytes) come from anonymous mmap: the kernel hands out zero pages on
// first touch, so cells never used cost neither a memset nor memory.
constexpr uint64_t kMmapThreshold = 1u << 20;

HostBuffer::HostBuffer(BufferType& type, uint64_t size) : type_(type), size_(size), owned_(true) {
  const uint64_t n = (size + 63) / 64 * 64;
  if (n >= kMmapThreshold) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("out of memory allocating a {} byte {} buffer", size, type.name());
    data_ = static_cast<uint8_t*>(p);
    mapped_ = n;
    return;
  }
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, n ? n : 64));
  if (!data_) fail("out of memory allocating a {} byte {} buffer", size, type.name());
  std::memset(data_, 0, n ? n : 64);
}

HostBuffer::HostBuffer(BufferType& type, const void* data, uint64_t size)
    : type_(type), data_(static_cast<uint8_t*>(const_cast<void*>(data))), size_(size), owned_(false) {}

HostBuffer::~HostBuffer() {
  if (!owned_) return;
  if (mapped_) ::munmap(data_, mapped_);
  else std::free(data_);
}

void HostBuffer::write(uint64_t offset, const void* src, uint64_t n) {
  if (offset + n > size_) fail("write past the end of a {} buffer", type_.name());
  if (n) std::memcpy(data_ + offset, src, n);
}

void HostBuffer::read(uint64_t offset, void* dst, uint64_t n) const {
  if (offset + n > size_) fail("read past the end of a {} buffer", type_.name());
  if (n) std::memcpy(dst, data_ + offset, n);
}

std::unique_ptr<Buffer> HostBufferType::allocate(uint64_t size) { return std::make_unique<HostBuffer>(*this, size); }

std::unique_ptr<Buffer> HostBufferType::wrap_host(const void* data, uint64_t size) {
  return std::make_unique<HostBuffer>(*this, data, size);
}

}  // namespace opal
