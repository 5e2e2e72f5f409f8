// sysemu_runner.h - runs Opal's ET kernel images for the kernel tests on AI Foundry's emulator
// linked in process, through the ET backend's driver seam (backends/et/driver: the sysemu
// driver, one emulated chip per test binary, shire 0, relaunched per test; the boot image and
// hart records as et_kernel_abi.h says). The coherence checker is on.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/driver.h"

namespace opal::et_test {

// The process's sysemu driver (shire 0, 32 minions, 2 threads, coherence checker on); null, with
// a test failure naming why (no sw-sysemu at configure time, OPAL_SHARED_DIR), if it cannot open.
et::Driver* sysemu_driver();
// A second one set up as a card sets up the L1 (DriverOptions::card_scratchpad: the firmware's
// split mode only; a scratchpad launch's kernel entry turns the scratchpad on itself). Its
// coherence checker is off: the checker wants every L1 line of the minion invalid when the cache
// mode changes, which U-mode code cannot arrange (EvictSW is an M-mode CSR, and the minion's
// other hart runs meanwhile); on the chip the scratchpad sets are apart from the cache's.
et::Driver* sysemu_card_driver();

struct EtRunResult {
  bool passed = false;      // every hart returned ET_STATUS_OK
  uint64_t cycles = 0;      // emulated cycles of the launch (boot stub included)
  et::LaunchResult launch;  // the driver's account (status, hart, mcause, kernel status, ...)
  std::string log;          // launch.describe() and the device's message
};

class EtDevice {
 public:
  EtDevice() = default;
  EtDevice(const EtDevice&) = delete;
  EtDevice& operator=(const EtDevice&) = delete;
  ~EtDevice();
  uint64_t shire_mask = 0x1;
  uint32_t minion_mask = 0x1;
  uint32_t threads = 2;
  uint64_t max_cycles = 20000000;
  bool scratchpad = false;  // the launch uses the tensor unit (L1 scratchpad on)
  bool card = false;        // on sysemu_card_driver() (set before the first alloc)

  // Device memory (64-byte aligned, zeroed), freed with the EtDevice.
  uint64_t alloc(uint64_t bytes);
  void write(uint64_t addr, const void* src, uint64_t bytes);
  void read(uint64_t addr, void* dst, uint64_t bytes) const;
  template <typename T>
  uint64_t upload(const std::vector<T>& v) {
    uint64_t a = alloc(v.size() * sizeof(T));
    write(a, v.data(), v.size() * sizeof(T));
    return a;
  }
  template <typename T>
  std::vector<T> download(uint64_t addr, size_t n) const {
    std::vector<T> v(n);
    read(addr, v.data(), n * sizeof(T));
    return v;
  }

  // A header for this device's launch configuration.
  EtArgsHeader header(uint32_t kernel_id, uint32_t blob_bytes) const;
  uint32_t harts() const { return et_hart_count(shire_mask, minion_mask, threads); }

  // Runs kernel image `image` (an et_kernel_image name) with this argument blob.
  EtRunResult run(const std::string& image, const void* blob, uint64_t blob_bytes);
  template <typename Args>
  EtRunResult run(const std::string& image, const Args& args) {
    return run(image, &args, sizeof(Args));
  }

 private:
  std::vector<uint64_t> allocs_;
};

// A contiguous tensor descriptor (nb from the type's block size).
EtTensor et_tensor(uint64_t addr, uint32_t type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
// Bytes of a contiguous tensor.
uint64_t et_tensor_bytes(const EtTensor& t);

}  // namespace opal::et_test
