#include "backends/cpu/host_buffer.h"

#include "core/error.h"

namespace opal {

HostBuffer::HostBuffer(BufferType& type, uint64_t size) : type_(type), size_(size), owned_(true) {
  const uint64_t n = (size + 63) / 64 * 64;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, n ? n : 64));
  if (!data_) fail("out of memory allocating a {} byte {} buffer", size, type.name());
  std::memset(data_, 0, n ? n : 64);
}

HostBuffer::HostBuffer(BufferType& type, const void* data, uint64_t size)
    : type_(type), data_(static_cast<uint8_t*>(const_cast<void*>(data))), size_(size), owned_(false) {}

HostBuffer::~HostBuffer() {
  if (owned_) std::free(data_);
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
