// Driver selection and the driver-independent parts of the seam (driver.h).
#include "backends/et/driver/driver.h"

#include <bit>
#include <cstring>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/fake/fake_driver.h"
#include "core/error.h"
#ifdef OPAL_ET_HAVE_SYSEMU
#include "backends/et/driver/sysemu/sysemu_driver.h"
#endif
#ifdef OPAL_ET_HAVE_ETRT
#include "backends/et/driver/etrt/etrt_driver.h"
#endif

namespace opal::et {

std::vector<uint8_t> card_launch_blob(const LaunchRequest& rq) {
  std::vector<uint8_t> blob = rq.args;
  if (!rq.scratchpad) return blob;
  if (blob.size() < sizeof(EtArgsHeader))
    fail("et: launch of '{}': argument blob of {} bytes is shorter than its {}-byte header", rq.kernel, blob.size(),
         sizeof(EtArgsHeader));
  EtArgsHeader h;
  std::memcpy(&h, blob.data(), sizeof(h));
  h.flags |= ET_ARGS_SCP_ON_ENTRY;
  std::memcpy(blob.data(), &h, sizeof(h));
  return blob;
}

unsigned HartSet::count() const {
  return unsigned(std::popcount(shire_mask)) * unsigned(std::popcount(minion_mask)) * threads;
}

const char* status_name(LaunchStatus s) {
  switch (s) {
    case LaunchStatus::Ok: return "ok";
    case LaunchStatus::KernelFailed: return "kernel reported failure";
    case LaunchStatus::Trap: return "trap";
    case LaunchStatus::Timeout: return "past its cycle budget";
    case LaunchStatus::Coherence: return "coherence hazard";
    case LaunchStatus::DeviceError: return "device error";
  }
  return "?";
}

static std::string hart_name(int hart) {
  if (hart < 0) return "unknown hart";
  return fmt::format("hart {} (shire {}, minion {}, thread {})", hart, hart / 64, hart % 64 / 2, hart % 2);
}

static const char* mcause_name(uint64_t c) {
  switch (c) {
    case 0: return "instruction address misaligned";
    case 1: return "instruction access fault";
    case 2: return "illegal instruction";
    case 4: return "load address misaligned";
    case 5: return "load access fault";
    case 6: return "store address misaligned";
    case 7: return "store access fault";
    case 8: return "ecall from U-mode";
    case 13: return "load page fault";
    case 15: return "store page fault";
    case 30: return "instruction ET-SoC-1 does not implement";
    default: return "exception";
  }
}

static const char* device_status_name(uint32_t s) {
  switch (s) {
    case ET_STATUS_BAD_ABI: return "argument blob of another ABI version";
    case ET_STATUS_NO_KERNEL: return "kernel id not in the image";
    case ET_STATUS_BAD_TYPE: return "tensor type not handled";
    case ET_STATUS_BAD_SHAPE: return "shape or strides not handled";
    case ET_STATUS_BAD_INDEX: return "index out of range";
    case ET_STATUS_BAD_ALIGN: return "misaligned address";
    case ET_STATUS_TRAP: return "trap";
    case ET_STATUS_BAD_LAUNCH: return "bad launch record";
    default: return "kernel-specific";
  }
}

std::string LaunchResult::describe() const {
  std::string s = fmt::format("kernel '{}': ", kernel);
  switch (status) {
    case LaunchStatus::Ok: s += fmt::format("ok, {} cycles on {} harts", cycles, harts); break;
    case LaunchStatus::Trap:
      s += fmt::format("trap on {}: mcause {} ({}), mepc {:#x}, mtval {:#x}", hart_name(hart), mcause,
                       mcause_name(mcause), mepc, mtval);
      break;
    case LaunchStatus::KernelFailed:
      s += fmt::format("{} reported failure", hart_name(hart));
      if (device_status)
        s +=
            fmt::format(": status {} ({}), detail {}", device_status, device_status_name(device_status), device_detail);
      break;
    case LaunchStatus::Timeout:
      s += fmt::format("ran past its cycle budget after {} cycles ({} still running, pc {:#x})", cycles,
                       hart_name(hart), pc);
      break;
    case LaunchStatus::Coherence:
      s += fmt::format(
          "coherence hazard: {} at pc {:#x} read or wrote line {:#x} that another core holds stale "
          "(missing evict/flush)",
          hart_name(hart), pc, address);
      break;
    case LaunchStatus::DeviceError: s += fmt::format("device error on {}", hart_name(hart)); break;
  }
  if (!ok() && !message.empty()) s += fmt::format(" [{}]", message);
  return s;
}

LaunchResult Driver::run(const LaunchRequest& request) {
  launch(request);
  return wait();
}

std::vector<DriverAvailability> available_drivers() {
  std::vector<DriverAvailability> v;
#ifdef OPAL_ET_HAVE_SYSEMU
  v.push_back({"sysemu", true, "sw-sysemu linked in process (" OPAL_ET_SYSEMU_DIR ")"});
#else
  v.push_back({"sysemu", false,
               "not built: no sw-sysemu found at configure time (an et-platform install under /opt/et, or "
               "OPAL_ET_SYSEMU_DIR, default ../shared/et-sysemu)"});
#endif
  v.push_back({"fake", true, "host model of the driver contract (tests)"});
#ifdef OPAL_ET_HAVE_ETRT
  v.push_back({"etrt", true, "et-platform runtime from /opt/et"});
#else
  v.push_back({"etrt", false, "not built: no et-platform runtime (rt::IRuntime) under /opt/et at configure time"});
#endif
  return v;
}

std::unique_ptr<Driver> open_driver(const DriverOptions& options) {
  for (const auto& d : available_drivers()) {
    if (d.name != options.kind) continue;
    if (!d.available) fail("et: driver '{}' is unavailable: {}", d.name, d.reason);
    if (d.name == "fake") return std::make_unique<FakeDriver>(options.harts);
#ifdef OPAL_ET_HAVE_SYSEMU
    if (d.name == "sysemu") return open_sysemu_driver(options);
#endif
#ifdef OPAL_ET_HAVE_ETRT
    if (d.name == "etrt") return open_etrt_driver(options);
#endif
  }
  fail("et: unknown driver '{}' (sysemu, fake, etrt)", options.kind);
}

}  // namespace opal::et
