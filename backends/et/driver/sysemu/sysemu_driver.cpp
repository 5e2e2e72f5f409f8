// The sysemu driver: AI Foundry's functional ET-SoC-1 emulator (sw-sysemu,
// ../shared/et-sysemu) linked into the process, driven as the card's firmware
// would drive it. Compiled only when CMake found the emulator
// (OPAL_ET_HAVE_SYSEMU).
//
// How the library is used (its README, "Linking the emulator into a host
// program", lists the quirks; each one is handled here):
//   - One emulated chip (sys_emu + bemu::System) per driver, created with the
//     driver's hart set; every hart is parked (unavailable) until a launch
//     starts the harts of its set at the image's entry in M-mode with
//     a0 = argument blob and a1 = environment (the boot stub's U-mode entry
//     passes them on, as the firmware does).
//   - Fatal paths: the library calls exit(1) from endSim() only when no
//     api_communicate listener is installed (checked in testLog.cpp of the
//     pinned commit: the only exit() call in libsw-sysemu.a); this driver is
//     such a listener, so a FATAL message (coherence hazard, a trap to address
//     0) becomes notify_fatal_error() and a failed LaunchResult. The library's
//     only abort() reference (main_memory.cpp) is libstdc++'s inline
//     assertion path. Bad addresses throw bemu::memory_error, which is not a
//     std::exception: caught and translated. So the emulator runs in process,
//     no worker process is needed: a launch costs no IPC or memory copies, and
//     device memory lives in one place.
//   - The failure state is sticky: after any failed launch the chip is
//     replaced by a fresh one before the next launch, and every live
//     allocation is copied over (device memory survives faults, as on a card
//     after a stream error).
//   - The coherence checker's directory is reset before every launch (the
//     firmware's cache flush at kernel boundaries).
//   - The error counter is process-wide: testLog::maxErrors_ is raised once.
//   - One run at a time per process (SoftFloat state, the global log
//     counter): a process-wide mutex serialises launches of every driver.
//   - Kernel output through validation1 goes to std::cout: redirected into the
//     launch's log while the emulator runs.
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>

// clang-format off
#include <agent.h>
#include <api_communicate.h>
#include <memory/memory_error.h>
#include <sys_emu.h>
#include <system.h>
// clang-format on

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/driver.h"
#include "backends/et/driver/elf_image.h"
#include "backends/et/driver/sysemu/sysemu_driver.h"
#include "backends/et/kernels/et_kernel_images.h"
#include "core/error.h"
#include "graph/offset_allocator.h"

namespace opal::et {
namespace {

constexpr uint64_t kArenaBase = 0x8010000000ull;  // DRAM + 256 MiB: above code, stacks and firmware areas
constexpr uint64_t kArenaSize = 0x0300000000ull;  // 12 GiB of the default 16 GiB DRAM
constexpr uint64_t kArgsSize = 64 * 1024;         // the argument blob slot
constexpr uint64_t kEnvSize = 64;                 // the kernel environment (et-soc.md §2.3)
constexpr uint64_t kPass = 0x1FEED000, kFail = 0x50BAD000;
constexpr uint64_t kNoTrap = ~0ull;  // mcause before a launch: no hart trapped

std::mutex& emulator_mutex() {
  static std::mutex m;
  return m;
}

std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }

// The emulated chip: a sys_emu whose api_communicate listener is this object.
class Chip final : private api_communicate {
 public:
  Chip(const HartSet& harts, bool mem_check) : harts_(harts) {
    testLog::maxErrors_ = UINT_MAX;
    sys_emu_cmd_options o;
    o.api_comm_path = "opal-in-process";
    o.shires_en = harts.shire_mask;
    o.minions_en = harts.minion_mask;
    o.second_thread = harts.threads > 1;
    o.max_cycles = ~0ull;  // the budget is enforced per launch in process()
    o.mem_check = mem_check;
    o.l1_scp_check = mem_check;  // the tensor checkers go with the coherence checker
    o.tstore_check = mem_check;
    o.log_thread.set();
    emu_ = std::make_unique<sys_emu>(o, static_cast<api_communicate*>(this));
    if (!sys_) fail("et sysemu: the emulator did not hand over its System");
    sys_->log.setOutputStream(&log_);
    sys_->log.setLogLevel(LOG_WARN);
    mem_check_ = mem_check;
    for_each_hart(harts_, [](bemu::Hart& h) { h.become_unavailable(); });
  }

  void write(uint64_t addr, const void* src, uint64_t n) {
    bemu::Noagent host{sys_, "host"};
    try {
      sys_->memory.write(host, addr, n, src);
    } catch (const bemu::memory_error& e) {
      fail("et sysemu: device write of {} bytes at {}: bad address {}", n, hex(addr), hex(e.addr));
    }
  }
  void read(uint64_t addr, void* dst, uint64_t n) {
    bemu::Noagent host{sys_, "host"};
    try {
      sys_->memory.read(host, addr, n, dst);
    } catch (const bemu::memory_error& e) {
      fail("et sysemu: device read of {} bytes at {}: bad address {}", n, hex(addr), hex(e.addr));
    }
  }
  void load_elf(const std::string& name, std::span<const uint8_t> image) {
    std::istringstream s(std::string(reinterpret_cast<const char*>(image.data()), image.size()));
    try {
      sys_->load_elf(s);
    } catch (const bemu::memory_error& e) {
      fail("et sysemu: kernel image '{}': a section lies at bad address {}", name, hex(e.addr));
    } catch (const std::exception& e) {
      fail("et sysemu: kernel image '{}' does not load: {} (a .riscv.attributes segment left in?)", name, e.what());
    }
  }

  // Runs `harts` from `entry` (M-mode) with a0/a1 set until every one passed,
  // one failed, the budget ran out or the emulator reported a fatal error.
  // `self_booting`: a bare-metal image with its own boot code, whose failing
  // hart is the one that wrote FAIL (and trapped, if mcause changed); for
  // images under the boot stub the driver reads the hart records instead.
  // `card_scratchpad`: a scratchpad launch gets only the firmware's split mode; its device code
  // turns the scratchpad on (DriverOptions::card_scratchpad).
  LaunchResult run(const LaunchRequest& rq, uint64_t entry, uint64_t a0, uint64_t a1, bool self_booting,
                   bool card_scratchpad = false) {
    LaunchResult r;
    r.kernel = rq.kernel;
    r.harts = rq.harts.count();
    log_.str("");
    if (mem_check_ && runs_ > 0) emu_->get_mem_checker() = mem_checker(sys_);
    runs_++;
    set_cache_mode(rq.harts, rq.scratchpad ? (card_scratchpad ? 1 : 3) : 0);
    for_each_hart(rq.harts, [&](bemu::Hart& h) {
      h.pc = entry;
      h.set_prv(bemu::Privilege::M);
      h.xregs[10] = a0;
      h.xregs[11] = a1;
      h.validation0 = 0;
      h.mcause = kNoTrap;
      h.start_running();
    });
    budget_ = rq.cycle_budget;
    cycles_ = 0;
    timed_out_ = fatal_ = false;
    std::ostringstream kernel_out;
    std::streambuf* saved = std::cout.rdbuf(kernel_out.rdbuf());
    std::string thrown;
    try {
      emu_->main_internal();
    } catch (const bemu::memory_error& e) {
      thrown = "memory error at " + hex(e.addr);
    } catch (const std::exception& e) {
      thrown = e.what();
    } catch (...) {
      thrown = "unknown exception";
    }
    std::cout.rdbuf(saved);
    r.cycles = cycles_;
    std::string log = kernel_out.str() + log_.str();
    bool failed = fatal_ || timed_out_ || sys_->get_emu_fail() || !thrown.empty();
    if (!failed) return r;
    failed_ = true;
    r.message = trim_log(log);
    if (!thrown.empty()) r.message += (r.message.empty() ? "" : "; ") + std::string("emulator threw: ") + thrown;
    static const std::regex hazard(
        R"(\((Coherency [A-Za-z ]+)\)\s*pc=([0-9a-fA-F]+), addr=([0-9a-fA-F]+).*shire_id=(\d+), minion_id=(\d+), thread_id=(\d+))");
    std::smatch m;
    std::optional<unsigned> bad, trapped, busy;
    for_each_hart_id(rq.harts, [&](unsigned id, bemu::Hart& h) {
      if (!trapped && h.mcause != kNoTrap) trapped = id;
      if (!bad && h.validation0 == kFail) bad = id;
      if (!busy && !h.is_unavailable() && h.validation0 != kFail) busy = id;
    });
    if (std::regex_search(log, m, hazard)) {
      r.status = LaunchStatus::Coherence;
      r.pc = std::stoull(m[2].str(), nullptr, 16);
      r.address = std::stoull(m[3].str(), nullptr, 16);
      r.hart = std::stoi(m[4].str()) * 64 + std::stoi(m[5].str()) * 2 + std::stoi(m[6].str());
    } else if (timed_out_) {
      r.status = LaunchStatus::Timeout;
      if (busy) {
        r.hart = int(*busy);
        r.pc = hart(*busy).pc;
      }
    } else if (self_booting && trapped) {
      auto& h = hart(*trapped);
      r.status = LaunchStatus::Trap;
      r.hart = int(*trapped);
      r.mcause = h.mcause;
      r.mepc = h.mepc;
      r.mtval = h.mtval;
    } else if (bad) {
      r.status = LaunchStatus::KernelFailed;
      r.hart = int(*bad);
    } else {
      r.status = LaunchStatus::DeviceError;
    }
    return r;
  }

  bool failed() const { return failed_; }

 private:
  // The firmware's part of the L1 set-up: a scratchpad launch gets every minion of its harts in
  // D1Split mode with the L1 scratchpad on (mcache_control 3: the tensor unit's operands), or in
  // D1Split mode only (1: a card's launch, whose device code turns the scratchpad on), any other
  // launch the shared L1 (0). Between launches the boot stub has evicted every L1 and the
  // coherence checker's directory is fresh, so the checker is told the mode with nothing cached
  // (its precondition); the scratchpad lines are zeroed when it is turned on, as on the chip.
  void set_cache_mode(const HartSet& hs, uint8_t mode) {
    for_each_hart_id(hs, [&](unsigned id, bemu::Hart& h) {
      if (id % 2 != 0 || h.core->mcache_control == mode) return;
      if (mode == 3)
        for (auto& line : h.core->scp) line.u8.fill(0);
      h.core->mcache_control = mode;
      h.core->ucache_control = uint16_t((h.core->ucache_control & ~3u) | mode);
    });
    if (!mem_check_) return;
    for_each_hart_id(hs, [&](unsigned id, bemu::Hart& h) {
      if (id % 2 == 0) emu_->get_mem_checker().mcache_control_up(id / 64, (id / 2) % 32, h.core->mcache_control);
    });
  }

  bemu::Hart& hart(unsigned id) { return sys_->cpu[id]; }
  template <class F>
  void for_each_hart_id(const HartSet& hs, F&& f) {
    for (unsigned s = 0; s < 32; s++) {
      if (!((hs.shire_mask >> s) & 1)) continue;
      for (unsigned m = 0; m < 32; m++) {
        if (!((hs.minion_mask >> m) & 1)) continue;
        for (unsigned t = 0; t < hs.threads; t++) {
          unsigned id = s * 64 + m * 2 + t;
          f(id, hart(id));
        }
      }
    }
  }
  template <class F>
  void for_each_hart(const HartSet& hs, F&& f) {
    for_each_hart_id(hs, [&](unsigned, bemu::Hart& h) { f(h); });
  }
  // The emulator's messages without its INFO chatter, at most ~2 KiB.
  static std::string trim_log(const std::string& log) {
    std::istringstream in(log);
    std::string line, out;
    while (std::getline(in, line)) {
      if (line.find("INFO") != std::string::npos || line.empty()) continue;
      if (line.find("Stopping simulation because max number of errors") != std::string::npos) continue;
      if (out.size() > 2048) {
        out += " ...";
        break;
      }
      out += (out.empty() ? "" : " | ") + line;
    }
    return out;
  }

  // api_communicate: the emulator calls these.
  void set_system(bemu::System* s) override { sys_ = s; }
  void process() override {
    if (++cycles_ > budget_) {
      timed_out_ = true;
      sys_->set_emu_done(true, true);
    }
  }
  bool raise_host_interrupt(uint32_t) override { return false; }
  bool host_memory_read(uint64_t, uint64_t, void*) override { return false; }
  bool host_memory_write(uint64_t, uint64_t, const void*) override { return false; }
  void notify_iatu_ctrl_2_reg_write(int, uint32_t, uint32_t) override {}
  void notify_fatal_error(const std::string&) override {
    fatal_ = true;
    if (sys_) sys_->set_emu_done(true, true);
  }

  HartSet harts_;
  bemu::System* sys_ = nullptr;
  std::unique_ptr<sys_emu> emu_;
  std::ostringstream log_;
  uint64_t budget_ = 0, cycles_ = 0;
  unsigned runs_ = 0;
  bool mem_check_ = false, timed_out_ = false, fatal_ = false, failed_ = false;
};

// Chips outlive their driver in a one-entry pool: creating one costs 0.1-0.6 s
// (a 60 MB model and its page faults), which every conformance case (a device
// each) used to pay. A pooled chip is reused only by a driver with the same
// harts and checker setting, and only if no launch failed on it; the new
// driver zeroes everything it allocates and launch ids are process-wide, so
// no memory or hart record of the previous user can pass for its own. Never
// destroyed (no emulator teardown during static destruction).
struct ChipPool {
  std::unique_ptr<Chip> chip;
  HartSet harts;
  bool mem_check = false;
};
ChipPool& chip_pool() {
  static ChipPool* pool = new ChipPool;
  return *pool;
}
bool same_harts(const HartSet& a, const HartSet& b) {
  return a.shire_mask == b.shire_mask && a.minion_mask == b.minion_mask && a.threads == b.threads;
}

class SysemuDriver final : public Driver {
 public:
  explicit SysemuDriver(const DriverOptions& o) : opts_(o), arena_(64) {
    info_.name = "sysemu";
    info_.harts = o.harts;
    info_.memory_bytes = kArenaSize;
    info_.description = fmt::format("sw-sysemu in process ({} harts: shires {:#x} x minions {:#x} x {} threads{})",
                                    o.harts.count(), o.harts.shire_mask, o.harts.minion_mask, o.harts.threads,
                                    o.mem_check ? ", coherence checker on" : "");
    if (o.harts.shire_mask == 0 || (o.harts.shire_mask >> 32) != 0 || o.harts.minion_mask == 0 ||
        (o.harts.threads != 1 && o.harts.threads != 2))
      fail("et sysemu: bad hart set (shire mask {:#x}, minion mask {:#x}, {} threads): compute shires 0-31",
           o.harts.shire_mask, o.harts.minion_mask, o.harts.threads);
    std::lock_guard lock(emulator_mutex());
    ChipPool& pool = chip_pool();
    if (pool.chip && same_harts(pool.harts, o.harts) && pool.mem_check == o.mem_check) chip_ = std::move(pool.chip);
    else chip_ = std::make_unique<Chip>(o.harts, o.mem_check);
    args_ = alloc_locked(kArgsSize, 64);
    env_ = alloc_locked(kEnvSize, 64);
  }
  ~SysemuDriver() override {
    std::lock_guard lock(emulator_mutex());
    if (!chip_ || chip_->failed()) return;
    ChipPool& pool = chip_pool();
    pool.chip = std::move(chip_);
    pool.harts = opts_.harts;
    pool.mem_check = opts_.mem_check;
  }
  const DriverInfo& info() const override { return info_; }

  DevAddr alloc(uint64_t size, uint64_t align) override {
    std::lock_guard lock(emulator_mutex());
    return alloc_locked(size, align);
  }
  void free(DevAddr addr) override {
    std::lock_guard lock(emulator_mutex());
    auto it = allocs_.find(addr);
    if (it == allocs_.end()) fail("et sysemu: free of {}: not an allocation", hex(addr));
    arena_.release(it->second.offset, it->second.reserved);
    allocs_.erase(it);
  }
  void copy_in(DevAddr dst, const void* src, uint64_t n) override {
    std::lock_guard lock(emulator_mutex());
    check_range(dst, n, "copy_in");
    chip_->write(dst, src, n);
  }
  void copy_out(DevAddr src, void* dst, uint64_t n) override {
    std::lock_guard lock(emulator_mutex());
    check_range(src, n, "copy_out");
    chip_->read(src, dst, n);
  }
  CodeId load_code(std::string_view name, std::span<const uint8_t> image) override {
    for (size_t i = 0; i < code_.size(); i++)
      if (code_[i].name == name) return CodeId(i);
    ElfInfo elf = parse_elf(name, image);
    code_.push_back({std::string(name), std::vector<uint8_t>(image.begin(), image.end()), elf.entry});
    return CodeId(code_.size() - 1);
  }
  void launch(const LaunchRequest& rq) override {
    if (rq.code >= code_.size()) fail("et sysemu: launch of '{}': code id {} was never loaded", rq.kernel, rq.code);
    if (rq.args.size() > kArgsSize)
      fail("et sysemu: launch of '{}': argument blob of {} bytes (at most {})", rq.kernel, rq.args.size(), kArgsSize);
    const HartSet& h = rq.harts;
    if ((h.shire_mask & ~info_.harts.shire_mask) || (h.minion_mask & ~info_.harts.minion_mask) ||
        h.threads > info_.harts.threads || h.threads == 0 || h.shire_mask == 0 || h.minion_mask == 0)
      fail("et sysemu: launch of '{}' on shires {:#x} x minions {:#x} x {} threads: outside the emulated chip ({})",
           rq.kernel, h.shire_mask, h.minion_mask, h.threads, info_.description);
    queue_.push_back(rq);
  }
  LaunchResult wait() override {
    std::lock_guard lock(emulator_mutex());
    LaunchResult last;
    std::vector<LaunchRequest> q;
    q.swap(queue_);
    for (const LaunchRequest& rq : q) {
      if (chip_->failed()) replace_chip();
      const Code& code = code_[rq.code];
      const bool self_booting = code.entry == ET_BOOT_ENTRY;
      if (!self_booting && !boot_loaded_) {
        std::span<const uint8_t> boot = et_kernel_image("boot");
        if (boot.empty())
          fail("et sysemu: launch of '{}': no boot image (the ET kernels were not built: {})", rq.kernel,
               et_kernels_unavailable_reason());
        chip_->load_elf("boot", boot);
        boot_loaded_ = true;
      }
      if (resident_ != rq.code) {
        chip_->load_elf(code.name, code.image);
        resident_ = rq.code;
        if (self_booting) boot_loaded_ = false;  // it overwrote the boot image
      }
      const bool card_scp = opts_.card_scratchpad && rq.scratchpad && !self_booting;
      const std::vector<uint8_t> blob = card_scp ? card_launch_blob(rq) : std::vector<uint8_t>();
      chip_->write(args_, card_scp ? blob.data() : rq.args.data(), rq.args.size());
      auto t0 = std::chrono::steady_clock::now();
      if (self_booting) {
        uint64_t env[8] = {ET_ABI_VERSION, rq.harts.shire_mask, 1000, 0, 0, 0, 0, 0};
        chip_->write(env_, env, sizeof env);
        last = chip_->run(rq, code.entry, args_, env_, true);
      } else {
        EtLaunch l{};
        l.magic = ET_LAUNCH_MAGIC;
        l.abi_version = ET_ABI_VERSION;
        l.entry_pc = code.entry;
        l.args = args_;
        l.launch_id = ++next_launch_id();
        l.shire_mask = rq.harts.shire_mask;
        l.minion_mask = rq.harts.minion_mask;
        l.threads = rq.harts.threads;
        l.freq_mhz = 1000;
        chip_->write(ET_LAUNCH_ADDR, &l, sizeof l);
        last = chip_->run(rq, ET_BOOT_ENTRY, args_, 0, false, card_scp);
        read_records(rq, l.launch_id, last);
      }
      last.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!last.ok()) {
        if (opts_.echo_log) fmt::print(stderr, "et sysemu: {}\n", last.describe());
        return last;
      }
    }
    return last;
  }

 private:
  struct Alloc {
    uint64_t offset = 0, size = 0, reserved = 0;
  };
  struct Code {
    std::string name;
    std::vector<uint8_t> image;
    uint64_t entry = 0;
  };

  DevAddr alloc_locked(uint64_t size, uint64_t align) {
    if (align < 64 || (align & (align - 1))) fail("et sysemu: alignment {} is not a power of two >= 64", align);
    uint64_t reserved = align_to(std::max<uint64_t>(size, 1), 64) + (align - 64);
    uint64_t off = arena_.alloc(reserved);
    if (off + reserved > kArenaSize) {
      arena_.release(off, reserved);
      fail("et sysemu: out of device memory: {} bytes requested, {} in use of {}", size, in_use(), kArenaSize);
    }
    DevAddr addr = align_to(kArenaBase + off, align);
    allocs_[addr] = {off, size, reserved};
    zero(addr, align_to(size, 64));
    return addr;
  }
  uint64_t in_use() const {
    uint64_t n = 0;
    for (auto& [a, al] : allocs_) n += al.reserved;
    return n;
  }
  void zero(DevAddr addr, uint64_t n) {
    static const std::vector<uint8_t> zeros(1 << 20);
    for (uint64_t done = 0; done < n;) {
      uint64_t k = std::min<uint64_t>(n - done, zeros.size());
      chip_->write(addr + done, zeros.data(), k);
      done += k;
    }
  }
  void check_range(DevAddr a, uint64_t n, const char* what) const {
    auto it = allocs_.upper_bound(a);
    if (it != allocs_.begin()) {
      --it;
      if (a >= it->first && a + n <= it->first + align_to(std::max<uint64_t>(it->second.size, 1), 64)) return;
    }
    fail("et sysemu: {} of {} bytes at {}: not inside one allocation", what, n, hex(a));
  }
  // The emulator's failure state is sticky: a fresh chip, with every live
  // allocation's bytes carried over.
  void replace_chip() {
    auto fresh = std::make_unique<Chip>(opts_.harts, opts_.mem_check);
    std::vector<uint8_t> buf;
    for (auto& [addr, al] : allocs_) {
      buf.resize(align_to(std::max<uint64_t>(al.size, 1), 64));
      chip_->read(addr, buf.data(), buf.size());
      fresh->write(addr, buf.data(), buf.size());
    }
    chip_ = std::move(fresh);
    resident_ = ~0u;
    boot_loaded_ = false;
  }

  // The boot stub's per-hart records (et_kernel_abi.h, EtHartRecord) say
  // which hart failed and how; a hart without a record of this launch never
  // finished it.
  void read_records(const LaunchRequest& rq, uint64_t launch_id, LaunchResult& r) {
    if (r.status == LaunchStatus::Coherence) return;  // the emulator's report is the better one
    std::vector<EtHartRecord> recs(ET_MAX_HARTS);
    chip_->read(ET_HART_RECORD_ADDR, recs.data(), recs.size() * sizeof(EtHartRecord));
    uint64_t kernel_cycles = 0, hart_cycles = 0;
    const EtHartRecord* first_bad = nullptr;
    int missing = -1;
    for (unsigned s = 0; s < 32; s++) {
      if (!((rq.harts.shire_mask >> s) & 1)) continue;
      for (unsigned m = 0; m < 32; m++) {
        if (!((rq.harts.minion_mask >> m) & 1)) continue;
        for (unsigned t = 0; t < rq.harts.threads; t++) {
          const EtHartRecord& e = recs[s * 64 + m * 2 + t];
          if (e.launch_id != launch_id || e.status == ET_STATUS_NOT_RUN) {
            if (missing < 0) missing = int(s * 64 + m * 2 + t);
            continue;
          }
          kernel_cycles = std::max(kernel_cycles, e.cycles);
          hart_cycles += e.cycles;
          if (e.status != ET_STATUS_OK && !first_bad) first_bad = &e;
        }
      }
    }
    r.kernel_cycles = kernel_cycles;
    r.hart_cycles = hart_cycles;
    if (first_bad) {
      r.hart = int(first_bad->hart);
      if (first_bad->status == ET_STATUS_TRAP) {
        r.status = LaunchStatus::Trap;
        r.mcause = first_bad->mcause;
        r.mepc = first_bad->mepc;
        r.mtval = first_bad->mtval;
      } else {
        r.status = LaunchStatus::KernelFailed;
        r.device_status = first_bad->status;
        r.device_detail = first_bad->detail;
      }
    } else if (r.ok() && missing >= 0) {
      r.status = LaunchStatus::DeviceError;
      r.hart = missing;
      r.message = "the hart left no record of this launch (boot stub and driver disagree?)";
    }
  }

  DriverOptions opts_;
  DriverInfo info_;
  std::unique_ptr<Chip> chip_;
  OffsetAllocator arena_;
  std::map<DevAddr, Alloc> allocs_;
  std::vector<Code> code_;
  std::vector<LaunchRequest> queue_;
  CodeId resident_ = ~0u;
  bool boot_loaded_ = false;
  // Process-wide (under the emulator mutex): a pooled chip's old hart records never match.
  static uint64_t& next_launch_id() {
    static uint64_t id = 0;
    return id;
  }
  DevAddr args_ = 0, env_ = 0;
};

}  // namespace

std::unique_ptr<Driver> open_sysemu_driver(const DriverOptions& options) {
  return std::make_unique<SysemuDriver>(options);
}

}  // namespace opal::et
