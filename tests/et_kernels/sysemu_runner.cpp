// sysemu_runner.cpp - see sysemu_runner.h.
#include "sysemu_runner.h"

#include <gtest/gtest.h>

#include <map>
#include <span>

#include "backends/et/kernels/et_kernel_images.h"
#include "core/error.h"

namespace opal::et_test {
namespace {

uint64_t block_bytes(uint32_t type, int64_t* block) {
  switch (type) {
    case ET_TYPE_F32: *block = 1; return 4;
    case ET_TYPE_F16: *block = 1; return 2;
    case ET_TYPE_Q8_0: *block = 32; return 34;
    case ET_TYPE_Q4_0: *block = 32; return 18;
    case ET_TYPE_Q4_K: *block = 256; return 144;
    case ET_TYPE_Q6_K: *block = 256; return 210;
    case ET_TYPE_I32: *block = 1; return 4;
    default: *block = 1; return 0;
  }
}

}  // namespace

namespace {
et::Driver* open_sysemu(std::unique_ptr<et::Driver>& drv, std::string& why, bool card) {
  if (!drv && why.empty()) {
    try {
      et::DriverOptions o;
      o.kind = "sysemu";
      o.harts = et::HartSet{0x1, 0xFFFFFFFF, 2};
      o.mem_check = !card;
      o.card_scratchpad = card;
      drv = et::open_driver(o);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (!drv) ADD_FAILURE() << "the ET emulator driver is unavailable: " << why;
  return drv.get();
}
}  // namespace

et::Driver* sysemu_driver() {
  static std::unique_ptr<et::Driver> drv;
  static std::string why;
  return open_sysemu(drv, why, false);
}

et::Driver* sysemu_card_driver() {
  static std::unique_ptr<et::Driver> drv;
  static std::string why;
  return open_sysemu(drv, why, true);
}

EtDevice::~EtDevice() {
  if (et::Driver* d = card ? sysemu_card_driver() : sysemu_driver())
    for (uint64_t a : allocs_) d->free(a);
}

uint64_t EtDevice::alloc(uint64_t bytes) {
  et::Driver* d = card ? sysemu_card_driver() : sysemu_driver();
  if (!d) return ET_HEAP_BASE;
  uint64_t a = d->alloc((bytes + 63) / 64 * 64, 64);
  allocs_.push_back(a);
  return a;
}

void EtDevice::write(uint64_t addr, const void* src, uint64_t bytes) {
  if (et::Driver* d = card ? sysemu_card_driver() : sysemu_driver()) d->copy_in(addr, src, bytes);
}

void EtDevice::read(uint64_t addr, void* dst, uint64_t bytes) const {
  if (et::Driver* d = card ? sysemu_card_driver() : sysemu_driver()) d->copy_out(addr, dst, bytes);
}

EtArgsHeader EtDevice::header(uint32_t kernel_id, uint32_t blob_bytes) const {
  EtArgsHeader h{};
  h.abi_version = ET_ABI_VERSION;
  h.kernel_id = kernel_id;
  h.shire_mask = shire_mask;
  h.minion_mask = minion_mask;
  h.threads = threads;
  h.blob_bytes = blob_bytes;
  return h;
}

EtRunResult EtDevice::run(const std::string& image, const void* blob, uint64_t blob_bytes) {
  EtRunResult r;
  et::Driver* d = card ? sysemu_card_driver() : sysemu_driver();
  if (!d) return r;
  std::span<const uint8_t> kern = et::et_kernel_image(image);
  if (kern.empty()) {
    ADD_FAILURE() << "no ET kernel image '" << image << "' (" << et::et_kernels_unavailable_reason() << ")";
    return r;
  }
  static std::map<std::pair<et::Driver*, std::string>, et::CodeId> loaded;
  auto it = loaded.find({d, image});
  if (it == loaded.end()) it = loaded.emplace(std::make_pair(d, image), d->load_code(image, kern)).first;
  et::LaunchRequest rq;
  rq.code = it->second;
  const auto* h = static_cast<const EtArgsHeader*>(blob);
  const char* name = blob_bytes >= sizeof(EtArgsHeader) ? et_kernel_name(h->kernel_id) : nullptr;
  rq.kernel = name ? name : image;
  rq.harts = et::HartSet{shire_mask, minion_mask, threads};
  rq.args.assign(static_cast<const uint8_t*>(blob), static_cast<const uint8_t*>(blob) + blob_bytes);
  rq.cycle_budget = max_cycles;
  rq.scratchpad = scratchpad;
  r.launch = d->run(rq);
  r.passed = r.launch.ok();
  r.cycles = r.launch.cycles;
  r.log = r.launch.describe() + "\n" + r.launch.message;
  return r;
}

EtTensor et_tensor(uint64_t addr, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
  EtTensor t{};
  t.addr = addr;
  t.type = type;
  t.ne[0] = int32_t(ne0);
  t.ne[1] = int32_t(ne1);
  t.ne[2] = int32_t(ne2);
  t.ne[3] = int32_t(ne3);
  int64_t block;
  uint64_t bb = block_bytes(type, &block);
  t.nb[0] = bb;
  t.nb[1] = bb * uint64_t(ne0 / block);
  t.nb[2] = t.nb[1] * uint64_t(ne1);
  t.nb[3] = t.nb[2] * uint64_t(ne2);
  return t;
}

uint64_t et_tensor_bytes(const EtTensor& t) { return t.nb[3] * uint64_t(t.ne[3]); }

}  // namespace opal::et_test
