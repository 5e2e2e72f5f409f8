#include "graph/offset_allocator.h"

#include <algorithm>

namespace opal {

uint64_t OffsetAllocator::alloc(uint64_t size) {
  size = align_to(std::max<uint64_t>(size, 1), align_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= size) {
      const uint64_t off = it->first;
      if (it->second == size) {
        free_.erase(it);
      } else {
        it->first += size;
        it->second -= size;
      }
      return off;
    }
  }
  // extend at the end (merging a trailing free block)
  uint64_t off = top_;
  if (!free_.empty() && free_.back().first + free_.back().second == top_) {
    off = free_.back().first;
    free_.pop_back();
  }
  top_ = off + size;
  return off;
}

void OffsetAllocator::release(uint64_t off, uint64_t size) {
  size = align_to(std::max<uint64_t>(size, 1), align_);
  auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, uint64_t(0)));
  it = free_.insert(it, {off, size});
  // merge with neighbours
  if (it + 1 != free_.end() && it->first + it->second == (it + 1)->first) {
    it->second += (it + 1)->second;
    free_.erase(it + 1);
  }
  if (it != free_.begin() && (it - 1)->first + (it - 1)->second == it->first) {
    (it - 1)->second += it->second;
    free_.erase(it);
  }
}

}  // namespace opal
