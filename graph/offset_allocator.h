// First-fit allocator of offsets in one device's compute buffer. The scheduler's
// memory plan walks the nodes in order, alloc()s each computed tensor and
// release()s it after its last reader; high_water() is the buffer size needed.
// Only offsets are handed out: no memory is touched.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace opal {

class OffsetAllocator {
 public:
  explicit OffsetAllocator(uint64_t alignment) : align_(alignment) {}
  // An aligned offset for `size` bytes: the first free block that fits, else the end.
  uint64_t alloc(uint64_t size);
  // Returns a block (the same size as allocated) and merges it with free neighbours.
  void release(uint64_t off, uint64_t size);
  uint64_t high_water() const { return top_; }

 private:
  uint64_t align_;
  uint64_t top_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> free_;  // (offset, size), sorted by offset
};

inline uint64_t align_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace opal
