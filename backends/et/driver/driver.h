// The ET-SoC-1 driver seam: everything the ET backend's host glue needs from a
// device, with three implementations:
//   sysemu/  AI Foundry's functional emulator linked in process (CI, and
//            `--backend et` without a card; built when CMake finds it),
//   fake/    a fast host model of the same contract for unit tests of the host
//            side (allocation, argument layout, error paths); runs registered
//            host functions instead of kernel ELFs,
//   etrt/    the et-platform runtime (rt::IRuntime) for a real card, built only
//            when CMake finds an et-platform install under /opt/et.
//
// The contract mirrors rt::IRuntime (docs: ../shared/docs/et-soc.md §2.2):
// device addresses are plain integers the host never dereferences; code is
// loaded once per kernel image and named by a CodeId; a launch names the code,
// a shire mask and an argument blob (the driver copies the blob into device
// memory and hands the kernel its address, as the firmware does: a0 = blob,
// a1 = environment); launches run in order; wait() returns what happened,
// with the hart, trap cause and emulated cycles where the device knows them.
// A driver never throws for a kernel fault (that is a LaunchResult); it throws
// opal::Error for misuse (bad address, unknown code, allocation failure).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace opal::et {

using DevAddr = uint64_t;  // a device address (DRAM at 0x80'0000'0000 on ET-SoC-1)
using CodeId = uint32_t;   // a loaded kernel image

// Where on the chip a launch runs. minion_mask applies to every shire of
// shire_mask; threads = 2 runs both harts of a minion, 1 only thread 0.
struct HartSet {
  uint64_t shire_mask = 0x1;
  uint32_t minion_mask = 0xFFFFFFFF;
  unsigned threads = 2;
  unsigned count() const;  // harts in the set
};

struct LaunchRequest {
  CodeId code = 0;
  std::string kernel;                // kernel entry / sub-op name, for errors and perf
  HartSet harts;                     // must be inside the driver's harts()
  std::vector<uint8_t> args;         // the argument blob (copied by the driver)
  uint64_t cycle_budget = 50000000;  // emulated cycles (sysemu); a real card uses timeout_s
  double timeout_s = 10.0;           // host wall-clock limit (etrt)
  // The launch uses the tensor unit: every minion's L1 in split mode with the L1 scratchpad on
  // (D1Split + ScpEnable, what the firmware sets up on a card) for the whole launch.
  bool scratchpad = false;
};

enum class LaunchStatus {
  Ok,
  KernelFailed,  // a hart signalled failure (nonzero return) without a trap
  Trap,          // a hart trapped (mcause); includes instructions ET-SoC-1 lacks (mcause 30)
  Timeout,       // past the cycle budget (sysemu) or the host timeout (etrt)
  Coherence,     // the emulator's memory-coherence checker found a hazard
  DeviceError,   // anything else the device or emulator reported
};
const char* status_name(LaunchStatus s);

struct LaunchResult {
  LaunchStatus status = LaunchStatus::Ok;
  std::string kernel;
  int hart = -1;                                  // the failing hart (shire * 64 + minion * 2 + thread), -1 unknown
  uint64_t mcause = 0, mepc = 0, mtval = 0;       // valid for Trap
  uint64_t pc = 0;                                // Coherence: the accessing instruction
  uint64_t address = 0;                           // Coherence: the 64-byte line
  uint64_t cycles = 0;                            // emulated cycles of the launch (sysemu), 0 unknown
  uint64_t kernel_cycles = 0;                     // the slowest hart's cycles in the kernel (boot stub records)
  uint64_t hart_cycles = 0;                       // every hart's cycles in the kernel summed: emulated instructions
  uint32_t device_status = 0, device_detail = 0;  // KernelFailed: the kernel's status code and detail
  unsigned harts = 0;                             // harts the launch ran on
  double wall_s = 0;                              // host wall-clock seconds of the launch
  std::string message;                            // the device's own words (emulator log, runtime error)
  bool ok() const { return status == LaunchStatus::Ok; }
  // One line: "kernel 'add_f32': trap on hart 3 (mcause 30: instruction ET-SoC-1 does not implement, mepc 0x...)".
  std::string describe() const;
};

struct DriverInfo {
  std::string name;         // "sysemu", "fake", "etrt"
  std::string description;  // one line for `opal ops`, errors
  HartSet harts;            // the largest hart set a launch may use
  uint64_t memory_bytes = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;
  virtual const DriverInfo& info() const = 0;
  // Device memory: `align` a power of two >= 64 (a cache line); the bytes are
  // zeroed (kernels read whole lines). Throws opal::Error when out of memory.
  virtual DevAddr alloc(uint64_t size, uint64_t align = 64) = 0;
  virtual void free(DevAddr addr) = 0;
  // Blocking copies; both ends must lie inside one allocation.
  virtual void copy_in(DevAddr dst, const void* src, uint64_t n) = 0;
  virtual void copy_out(DevAddr src, void* dst, uint64_t n) = 0;
  // Loads a kernel image (an ELF for sysemu and etrt; fake: a name registered
  // with FakeDriver::add_kernel and any bytes). Same name again: the same id.
  virtual CodeId load_code(std::string_view name, std::span<const uint8_t> image) = 0;
  // Queues a launch; wait() runs (or waits for) every queued launch in order
  // and returns the first failure, or the last launch's result when all pass.
  // After a failure the rest of the queue is dropped.
  virtual void launch(const LaunchRequest& request) = 0;
  virtual LaunchResult wait() = 0;
  // Launch and wait.
  LaunchResult run(const LaunchRequest& request);
};

// Which drivers this build has, with the reason for each one it lacks
// ("sysemu: not built: no et-sysemu found at configure time (OPAL_ET_SYSEMU_DIR)").
struct DriverAvailability {
  std::string name;
  bool available = false;
  std::string reason;
};
std::vector<DriverAvailability> available_drivers();

struct DriverOptions {
  std::string kind = "sysemu";  // "sysemu", "fake", "etrt"
  HartSet harts;                // sysemu: the emulated chip's enabled harts
  bool mem_check = true;        // sysemu: the coherence checker
  bool echo_log = false;        // sysemu: copy emulator messages to stderr
  // sysemu: set up scratchpad launches as on a card (the firmware's part only: the L1 in split
  // mode; the kernel's entry turns the scratchpad on, card_launch_blob), to test that path
  bool card_scratchpad = false;
};

// The argument blob a card launch sends for `rq`: rq.args, with ET_ARGS_SCP_ON_ENTRY set in its
// header's flags when the launch uses the scratchpad (the firmware only splits the L1; the
// device code turns the scratchpad on, et_kernel_abi.h). Throws opal::Error naming the kernel
// when the blob is shorter than an EtArgsHeader.
std::vector<uint8_t> card_launch_blob(const LaunchRequest& rq);

// Opens a driver; throws opal::Error naming why when the kind is not built or
// cannot open.
std::unique_ptr<Driver> open_driver(const DriverOptions& options);

}  // namespace opal::et
