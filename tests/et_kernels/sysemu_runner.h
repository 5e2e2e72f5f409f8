// sysemu_runner.h - runs Opal's ET kernel images on AI Foundry's sys_emu executable
// (../shared/et-sysemu/bin/sys_emu) for the kernel tests: the boot image plus a kernel image,
// a device heap image preloaded at ET_HEAP_BASE, the EtLaunch record, and the heap dumped back
// after the run. The coherence checker (-mem_check) is on unless a test turns it off.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/et/abi/et_kernel_abi.h"

namespace opal::et_test {

// The sys_emu executable; "" (and a test failure naming the path and OPAL_SHARED_DIR) if absent.
std::string sysemu_path();

struct EtRunResult {
  int exit_status = -1;
  bool passed = false;  // every hart signalled PASS
  uint64_t cycles = 0;  // emulated cycles of the whole run (boot stub included)
  std::string log;      // the emulator's output, INFO lines dropped
};

class EtDevice {
 public:
  uint64_t shire_mask = 0x1;
  uint32_t minion_mask = 0x1;
  uint32_t threads = 2;
  bool mem_check = true;
  uint64_t max_cycles = 20000000;

  // Device memory from the heap (64-byte aligned, zero-filled padding).
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

  // Copies the blob to the heap and runs kernel image `image` (an et_kernel_image name).
  EtRunResult run(const std::string& image, const void* blob, uint64_t blob_bytes);
  template <typename Args>
  EtRunResult run(const std::string& image, const Args& args) {
    return run(image, &args, sizeof(Args));
  }

 private:
  std::vector<uint8_t> heap_;
  uint64_t launch_id_ = 0;
};

// A contiguous tensor descriptor (nb from the type's block size).
EtTensor et_tensor(uint64_t addr, uint32_t type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
// Bytes of a contiguous tensor.
uint64_t et_tensor_bytes(const EtTensor& t);

}  // namespace opal::et_test
