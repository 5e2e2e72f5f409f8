// sysemu_runner.cpp - see sysemu_runner.h.
#include "sysemu_runner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <span>
#include <sstream>

#include "backends/et/kernels/et_kernel_images.h"
#include "support/test_support.h"

namespace opal::et_test {
namespace {

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

uint64_t block_bytes(uint32_t type, int64_t* block) {
  switch (type) {
    case ET_TYPE_F32: *block = 1; return 4;
    case ET_TYPE_F16: *block = 1; return 2;
    case ET_TYPE_Q8_0: *block = 32; return 34;
    case ET_TYPE_Q4_0: *block = 32; return 18;
    case ET_TYPE_Q4_K: *block = 256; return 144;
    case ET_TYPE_I32: *block = 1; return 4;
    default: *block = 1; return 0;
  }
}

}  // namespace

std::string sysemu_path() {
  std::string p = test::shared_dir() + "/et-sysemu/bin/sys_emu";
  if (!std::filesystem::exists(p)) {
    ADD_FAILURE() << "the ET emulator is missing: " << p << " (set OPAL_SHARED_DIR to the folder holding et-sysemu/)";
    return "";
  }
  return p;
}

uint64_t EtDevice::alloc(uint64_t bytes) {
  uint64_t off = (heap_.size() + 63) / 64 * 64;
  heap_.resize(off + (bytes + 63) / 64 * 64, 0);
  return ET_HEAP_BASE + off;
}

void EtDevice::write(uint64_t addr, const void* src, uint64_t bytes) {
  ASSERT_GE(addr, ET_HEAP_BASE);
  ASSERT_LE(addr - ET_HEAP_BASE + bytes, heap_.size());
  std::memcpy(heap_.data() + (addr - ET_HEAP_BASE), src, bytes);
}

void EtDevice::read(uint64_t addr, void* dst, uint64_t bytes) const {
  ASSERT_GE(addr, ET_HEAP_BASE);
  ASSERT_LE(addr - ET_HEAP_BASE + bytes, heap_.size());
  std::memcpy(dst, heap_.data() + (addr - ET_HEAP_BASE), bytes);
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
  const std::string emu = sysemu_path();
  if (emu.empty()) return r;
  std::span<const uint8_t> boot = et::et_kernel_image("boot"), kern = et::et_kernel_image(image);
  if (boot.empty() || kern.empty()) {
    ADD_FAILURE() << "no ET kernel image '" << image << "' (" << et::et_kernels_unavailable_reason() << ")";
    return r;
  }
  const uint64_t args = alloc(blob_bytes);
  write(args, blob, blob_bytes);

  const std::string dir = test::temp_dir();
  write_file(dir + "/boot.elf", boot.data(), boot.size());
  write_file(dir + "/kernel.elf", kern.data(), kern.size());
  write_file(dir + "/heap.bin", heap_.data(), heap_.size());
  EtLaunch l{};
  l.magic = ET_LAUNCH_MAGIC;
  l.abi_version = ET_ABI_VERSION;
  l.entry_pc = ET_KERNEL_ENTRY;
  l.args = args;
  l.launch_id = ++launch_id_;
  l.shire_mask = shire_mask;
  l.minion_mask = minion_mask;
  l.threads = threads;
  l.freq_mhz = 1000;
  write_file(dir + "/launch.bin", &l, sizeof(l));

  std::ostringstream cmd;
  cmd << emu << " -elf_load " << dir << "/boot.elf -elf_load " << dir << "/kernel.elf"
      << " -reset_pc 0x" << std::hex << ET_BOOT_ENTRY << " -shires 0x" << shire_mask << " -minions 0x" << minion_mask
      << std::dec << (threads == 1 ? " -single_thread" : "") << " -max_cycles " << max_cycles
      << (mem_check ? " -mem_check" : "") << " -file_load 0x" << std::hex << ET_LAUNCH_ADDR << "," << dir
      << "/launch.bin -file_load 0x" << ET_HEAP_BASE << "," << dir << "/heap.bin -dump_addr 0x" << ET_HEAP_BASE
      << std::dec << " -dump_size " << heap_.size() << " -dump_file " << dir << "/dump.bin 2>&1";
  std::string out;
  r.exit_status = test::run_command(cmd.str(), &out);
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.find(" INFO ") == std::string::npos) r.log += line + "\n";
  std::smatch m;
  static const std::regex kCycles(R"(\((\d+) cycles)");
  if (std::regex_search(out, m, kCycles)) r.cycles = std::stoull(m[1]);
  r.passed = r.exit_status == 0;
  if (r.passed) {
    std::vector<uint8_t> dump = test::read_bytes(dir + "/dump.bin");
    if (dump.size() != heap_.size()) {
      ADD_FAILURE() << "sys_emu dumped " << dump.size() << " bytes, expected " << heap_.size();
      r.passed = false;
    } else {
      heap_ = std::move(dump);
    }
  }
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
