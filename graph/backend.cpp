// Default behaviour of the backend interface (backend.h).
#include "graph/backend.h"

#include <chrono>
#include <cstring>

#include "core/error.h"

namespace opal {

int64_t phase_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double DeviceStats::get(std::string_view name) const {
  for (const Value& v : values)
    if (v.name == name) return v.value;
  return 0;
}

uint64_t BufferType::weight_size(const Tensor& t) const { return t.nbytes(); }

void BufferType::upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) {
  const uint64_t n = t.nbytes();
  if (offset + n > buf.size()) fail("upload of '{}' runs past its {} buffer", t.name, name());
  buf.write(offset, host_bytes, n);
  t.buffer = &buf;
  t.data = static_cast<uint8_t*>(buf.base()) + offset;
}

void BufferType::repack_weight(Tensor& t, uint8_t layout) const {
  fail("buffer type {} cannot repack weight '{}' into layout {}", name(), t.name, int(layout));
}

Support Device::supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const {
  if (consumers.empty()) return Support::no("no op reads it");
  for (const Tensor* c : consumers) {
    Support s = supports(*c);
    if (!s) return Support::no(std::string(op_name(c->op)) + " '" + c->name + "': " + s.reason);
  }
  return Support::yes();
}

bool Device::can_access(const Buffer& buf) const {
  BufferType& bt = buf.type();
  if (&bt == &const_cast<Device*>(this)->weight_buffer_type()) return true;
  if (&bt == &const_cast<Device*>(this)->compute_buffer_type()) return true;
  return role() == DeviceRole::Host && bt.host_visible();
}

}  // namespace opal
