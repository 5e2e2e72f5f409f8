// Plain host memory: the CPU backend's buffers (and the staging area for
// copies). A HostBuffer either owns aligned memory or wraps caller bytes.
#pragma once
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "graph/backend.h"

namespace opal {

// Which part of a large host buffer (>= 2 MiB, 2 MiB aligned) is advised onto
// transparent huge pages: $OPAL_HOST_HUGE 0 = none, 2 = all, else (default)
// all but the first 2 MiB (read at each allocation; host_buffer.cpp says why).
enum class HostHuge { Off, Tail, All };
HostHuge host_huge_pages();

class HostBuffer : public Buffer {
 public:
  HostBuffer(BufferType& type, uint64_t size);  // owns zeroed, 64-byte aligned memory (mmap when large,
                                                // 2 MiB aligned on huge pages from 2 MiB)
  HostBuffer(BufferType& type, const void* data, uint64_t size);  // wraps (read-only use)
  ~HostBuffer() override;
  BufferType& type() const override { return type_; }
  uint64_t size() const override { return size_; }
  void* base() override { return data_; }
  void write(uint64_t offset, const void* src, uint64_t n) override;
  void read(uint64_t offset, void* dst, uint64_t n) const override;

 private:
  BufferType& type_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool owned_ = false;
  uint64_t mapped_ = 0;  // bytes mapped with mmap (large buffers), else 0
};

class HostBufferType : public BufferType {
 public:
  explicit HostBufferType(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool host_visible() const override { return true; }
  std::unique_ptr<Buffer> allocate(uint64_t size) override;
  std::unique_ptr<Buffer> wrap_host(const void* data, uint64_t size) override;

 private:
  std::string name_;
};

}  // namespace opal
