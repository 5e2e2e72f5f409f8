#include "graph/host_buffer.h"

#include <sys/mman.h>

#include <string_view>

#include "core/error.h"

namespace opal {

// Large buffers (a KV cache sized for a model's whole trained context can be
// gigabytes) come from anonymous mmap: the kernel hands out zero pages on
// first touch, so cells never used cost neither a memset nor memory.
//
// Buffers of 2 MiB or more are mapped 2 MiB aligned (over-mapped by 2 MiB and
// trimmed to an aligned start and a whole number of 2 MiB) and can be advised
// onto transparent huge pages, like the weights (--lm huge). Commit stays lazy
// (no populate, no zeroing pass), but a touched huge page commits its whole
// 2 MiB. The advice is opt-in, $OPAL_HOST_HUGE:
//   unset / 0  no advice: 4 KiB pages (the default);
//   1          advised from each buffer's second 2 MiB on, so a short run, which
//              touches the first cells of every layer's K and V buffer, does not
//              commit 2 MiB per buffer;
//   2          the whole buffer advised (Qwen3's 56 K/V buffers: +115 MB RSS on a
//              short run; tg64 @ d4096 --fa 1 10-20 % faster on our host).
// Why it is not the default (docs/perf/long-contexts2.md, "Stop 21, hp"): with
// 1 the decode at depth measured no faster than with 4 KiB pages, and with 1 or
// 2 the token whose cells enter a new 2 MiB of every layer's buffers pays all
// those first touches at once (Qwen3: 56 faults, 0.2-0.5 s on our PVM guest,
// once every 1024 tokens), a stall a streaming user sees, where 4 KiB pages
// spread the same cost at ~1.6 ms a token.
constexpr uint64_t kMmapThreshold = 1u << 20;
constexpr uint64_t kHugePage = 2u << 20;

HostHuge host_huge_pages() {
  const char* env = std::getenv("OPAL_HOST_HUGE");
  const std::string_view v = env ? env : "";
  return v == "1" ? HostHuge::Tail : v == "2" ? HostHuge::All : HostHuge::Off;
}

namespace {

// n bytes of zeroed anonymous memory, 2 MiB aligned when n >= 2 MiB; sets
// *mapped to the bytes to munmap.
uint8_t* map_anonymous(uint64_t n, uint64_t* mapped) {
  const bool huge = n >= kHugePage;
  const uint64_t want = huge ? (n + kHugePage - 1) / kHugePage * kHugePage : n;
  const uint64_t over = huge ? want + kHugePage : want;
  void* p = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  *mapped = want;
  if (!huge) return base;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
  auto* aligned = reinterpret_cast<uint8_t*>((addr + kHugePage - 1) / kHugePage * kHugePage);
  const uint64_t head = uint64_t(aligned - base), tail = over - head - want;
  if (head) ::munmap(base, head);
  if (tail) ::munmap(aligned + want, tail);
  const HostHuge mode = host_huge_pages();
  const uint64_t from = mode == HostHuge::All ? 0 : kHugePage;
  if (mode != HostHuge::Off && want > from) ::madvise(aligned + from, want - from, MADV_HUGEPAGE);  // a hint
  return aligned;
}

}  // namespace

HostBuffer::HostBuffer(BufferType& type, uint64_t size) : type_(type), size_(size), owned_(true) {
  const uint64_t n = (size + 63) / 64 * 64;
  if (n >= kMmapThreshold) {
    data_ = map_anonymous(n, &mapped_);
    if (!data_) fail("out of memory allocating a {} byte {} buffer", size, type.name());
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
