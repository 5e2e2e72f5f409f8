// The ET Device, weight BufferType and Executor (see et_device.h).
#include "backends/et/host/et_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/elf_image.h"
#include "backends/et/kernels/et_kernel_images.h"
#include "backends/et/lower/lower.h"
#include "core/error.h"
#include "graph/offset_allocator.h"

namespace opal {
namespace {

using et::DevAddr;

// Host bytes of the GGUF weights plus their device copies made at upload.
class EtWeightBuffer : public HostBuffer {
 public:
  EtWeightBuffer(EtWeightBufferType& t, et::Driver& d, uint64_t size) : HostBuffer(t, size), owner_(t), driver_(d) {}
  ~EtWeightBuffer() override {
    for (auto& [t, a] : copies_) {
      owner_.forget(t);
      driver_.free(a);
    }
  }
  void keep(const Tensor* t, DevAddr a) { copies_.emplace_back(t, a); }
  et::Driver& driver() { return driver_; }

 private:
  EtWeightBufferType& owner_;
  et::Driver& driver_;
  std::vector<std::pair<const Tensor*, DevAddr>> copies_;
};

// One span of host bytes a launch reads or writes, staged at dev + (p - lo).
struct Region {
  const uint8_t* lo = nullptr;
  uint64_t bytes = 0;
  uint64_t dev_off = 0;  // from the plan's staging base
  bool in = false;
};

struct EtNode {
  Tensor* node = nullptr;
  uint32_t kernel = 0;   // 0: the CPU runs it
  std::string why_cpu;   // when kernel == 0
  uint64_t staging = 0;  // bytes of staging it needs (compile time)
  bool faulted = false;  // a launch failed: the CPU runs it from now on
};

struct EtPlan : Plan {
  et::Driver* driver = nullptr;
  DevAddr staging = 0;
  uint64_t staging_bytes = 0;
  DevAddr scratch = 0;  // zeroed before each launch that uses it (lower.h scratch_bytes)
  uint64_t scratch_bytes = 0;
  std::vector<EtNode> nodes;
  HostFallback* fallback = nullptr;
  ~EtPlan() override {
    if (staging) driver->free(staging);
    if (scratch) driver->free(scratch);
  }
};

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

// ---- weights

std::unique_ptr<Buffer> EtWeightBufferType::allocate(uint64_t size) {
  return std::make_unique<EtWeightBuffer>(*this, dev_.driver(), size);
}

void EtWeightBufferType::upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) {
  BufferType::upload_weight(t, host_bytes, buf, offset);  // the GGUF bytes, for the CPU
  auto* ebuf = dynamic_cast<EtWeightBuffer*>(&buf);
  if (!ebuf) return;
  const uint64_t n = t.nbytes();
  const DevAddr a = ebuf->driver().alloc(n);
  ebuf->driver().copy_in(a, host_bytes, n);
  ebuf->keep(&t, a);
  dev_copy_[&t] = a;
  device_bytes_ += n;
}

DevAddr EtWeightBufferType::device_address(const Tensor& t) const {
  auto it = dev_copy_.find(&t);
  return it == dev_copy_.end() ? 0 : it->second;
}

// ---- device

std::string et_unavailable_reason(const std::string& driver) {
  bool known = false;
  for (const auto& d : et::available_drivers()) {
    if (d.name != driver) continue;
    known = true;
    if (!d.available) return fmt::format("the {} driver is unavailable: {}", d.name, d.reason);
  }
  if (!known) return fmt::format("unknown ET driver '{}' (sysemu, fake, etrt)", driver);
  if (driver != "fake" && et::et_kernel_image("all").empty())
    return fmt::format("no ET kernel images in this build: {}", et::et_kernels_unavailable_reason());
  return {};
}

EtDevice::EtDevice(const EtOptions& options) : options_(options) {
  std::string why = et_unavailable_reason(options.driver);
  if (!why.empty()) fail("et: the ET backend is unavailable: {}", why);
  et::DriverOptions d;
  d.kind = options.driver;
  d.harts = options.harts;
  d.mem_check = options.mem_check;
  driver_ = et::open_driver(d);
  std::span<const uint8_t> img = et::et_kernel_image(options.image);
  if (img.empty()) fail("et: no kernel image '{}' in this build", options.image);
  init_image(std::vector<uint8_t>(img.begin(), img.end()));
}

EtDevice::EtDevice(const EtOptions& options, std::unique_ptr<et::Driver> driver, std::vector<uint8_t> image)
    : options_(options), driver_(std::move(driver)) {
  init_image(std::move(image));
}

EtDevice::~EtDevice() = default;

void EtDevice::init_image(std::vector<uint8_t> image) {
  image_ = std::move(image);
  code_ = driver_->load_code(options_.image, image_);
  // The kernel ids of the image's entry table (et_kernel_abi.h EtKernelEntry).
  auto start = et::elf_symbol(image_, "__et_kernel_table_start");
  auto end = et::elf_symbol(image_, "__et_kernel_table_end");
  if (start && end && *end >= *start) {
    std::vector<uint8_t> table = et::elf_read(image_, *start, *end - *start);
    for (size_t i = 0; i + sizeof(EtKernelEntry) <= table.size(); i += sizeof(EtKernelEntry)) {
      EtKernelEntry e;
      std::memcpy(&e, table.data() + i, sizeof e);
      kernels_.insert(e.kernel_id);
    }
  }
}

std::string EtDevice::description() const {
  const et::DriverInfo& i = driver_->info();
  return fmt::format("et (ET-SoC-1 via {}: {}; image '{}' with {} kernels; launches on {} harts)", i.name,
                     i.description, options_.image, kernels_.size(), options_.harts.count());
}

bool EtDevice::can_access(const Buffer& buf) const { return buf.type().host_visible(); }

Support EtDevice::supports_node(const Tensor& node, bool check_weights) const {
  et::KernelChoice k = et::choose_kernel(node);
  if (!k) return Support::no(k.reason);
  if (!kernels_.count(k.kernel_id))
    return Support::no(fmt::format("kernel {} is not in the ET image '{}' (backends/et/kernels has none yet)",
                                   et_kernel_name(k.kernel_id), options_.image));
  if (check_weights)
    for (const Tensor* s : node.src) {
      if (!s) continue;
      const Tensor* st = s->storage();
      if (st->is_leaf() && st->role == TensorRole::Weight && st->buffer && !weights_.device_address(*st))
        return Support::no(fmt::format("weight '{}' has no ET copy (held on {})", st->name, st->buffer->type().name()));
    }
  return Support::yes();
}

Support EtDevice::supports(const Tensor& node) const { return supports_node(node, true); }

Support EtDevice::supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const {
  if (consumers.empty()) return Support::no("no op reads it");
  std::string first_reason;
  for (const Tensor* c : consumers) {
    Support s = supports_node(*c, false);
    if (s) return Support::yes();
    if (first_reason.empty()) first_reason = s.reason;
  }
  return Support::no(first_reason);
}

DeviceStats EtDevice::stats() const {
  DeviceStats d;
  d.values = {{"nodes_run", double(stats_.nodes_run)},
              {"nodes_fallback", double(stats_.nodes_fallback)},
              {"plans_compiled", double(stats_.plans_compiled)},
              {"launches", double(stats_.launches)},
              {"emulated_cycles", double(stats_.emulated_cycles)},
              {"bytes_staged_in", double(stats_.bytes_staged_in)},
              {"bytes_staged_out", double(stats_.bytes_staged_out)},
              {"weight_bytes", double(weights_.device_bytes())}};
  return d;
}

// ---- executor

namespace {

// The host spans node `n` reads (non-resident sources) and writes (its
// output), merged where they overlap (a KV_STORE writes into its source's
// bytes), each placed at a 64-byte line with the host address's offset in
// the line kept (kernels see the same alignment as the host).
std::vector<Region> regions_of(const Tensor& n, const EtWeightBufferType& w, uint64_t* total) {
  struct Span {
    const uint8_t* lo;
    const uint8_t* hi;
    bool in;
  };
  std::vector<Span> spans;
  for (const Tensor* s : et::kernel_sources(n)) {
    const Tensor* st = s->storage();
    if (st->is_leaf() && w.device_address(*st)) continue;  // resident weight
    const uint8_t* p = static_cast<const uint8_t*>(s->data);
    if (!p) fail("et: source '{}' of '{}' has no memory", s->name, n.name);
    spans.push_back({p, p + s->nbytes(), true});
  }
  const uint8_t* o = static_cast<const uint8_t*>(n.data);
  if (!o) fail("et: node '{}' has no memory", n.name);
  spans.push_back({o, o + n.nbytes(), et::writes_in_place(n)});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  std::vector<Region> out;
  const uint8_t* hi = nullptr;
  for (const Span& s : spans) {
    if (!out.empty() && s.lo < hi) {
      hi = std::max(hi, s.hi);
      out.back().bytes = uint64_t(hi - out.back().lo);
      out.back().in = out.back().in || s.in;
      continue;
    }
    out.push_back({s.lo, uint64_t(s.hi - s.lo), 0, s.in});
    hi = s.hi;
  }
  uint64_t off = 0;
  for (Region& r : out) {
    off = align_to(off, 64) + (reinterpret_cast<uintptr_t>(r.lo) & 63);
    r.dev_off = off;
    off += r.bytes;
  }
  *total = align_to(off, 64);
  return out;
}

}  // namespace

std::unique_ptr<Plan> EtExecutor::compile(const Segment& segment) {
  auto p = std::make_unique<EtPlan>();
  p->driver = &dev_.driver();
  p->fallback = dev_.options().fallback_to_cpu ? segment.fallback : nullptr;
  for (Tensor* n : segment.nodes) {
    EtNode en;
    en.node = n;
    et::KernelChoice k = et::choose_kernel(*n);
    if (!k) {
      if (!p->fallback) fail("et: cannot run '{}' ({}): {}", n->name, op_name(n->op), k.reason);
      en.why_cpu = k.reason;
    } else {
      en.kernel = k.kernel_id;
      try {
        regions_of(*n, dev_.weights(), &en.staging);
      } catch (const Error& e) {
        if (!p->fallback) throw;
        en.kernel = 0;
        en.why_cpu = e.what();
      }
    }
    p->staging_bytes = std::max(p->staging_bytes, en.staging);
    if (en.kernel)
      p->scratch_bytes = std::max(p->scratch_bytes, et::scratch_bytes(*n, en.kernel, dev_.options().harts));
    p->nodes.push_back(std::move(en));
  }
  if (p->staging_bytes) p->staging = dev_.driver().alloc(p->staging_bytes);
  if (p->scratch_bytes) p->scratch = dev_.driver().alloc(p->scratch_bytes);
  ++dev_.mutable_stats().plans_compiled;
  return p;
}

void EtExecutor::run(Plan& plan, RunHooks* hooks) {
  auto& p = static_cast<EtPlan&>(plan);
  EtStats& st = dev_.mutable_stats();
  et::Driver& drv = dev_.driver();
  std::lock_guard lock(launch_mutex());
  for (EtNode& en : p.nodes) {
    Tensor& n = *en.node;
    if (hooks) hooks->before_node(dev_, n);
    const char* kernel = "et-cpu-fallback";
    bool done = false;
    if (en.kernel && !en.faulted) {
      std::string error;
      et::LaunchResult r;
      int64_t t0 = hooks ? phase_clock_ns() : 0, t1 = 0, t2 = 0;
      uint64_t in_bytes = 0, out_bytes = 0;
      try {
        uint64_t total = 0;
        std::vector<Region> regions = regions_of(n, dev_.weights(), &total);
        if (total > p.staging_bytes)
          fail("et: '{}' needs {} bytes of staging, the plan has {}", n.name, total, p.staging_bytes);
        for (const Region& rg : regions)
          if (rg.in) {
            drv.copy_in(p.staging + rg.dev_off, rg.lo, rg.bytes);
            in_bytes += rg.bytes;
          }
        auto addr = [&](const Tensor& t) -> DevAddr {
          const Tensor* s = t.storage();
          const uint8_t* d = static_cast<const uint8_t*>(t.data);
          if (DevAddr w = dev_.weights().device_address(*s))
            return w + uint64_t(d - static_cast<const uint8_t*>(s->data));
          for (const Region& rg : regions)
            if (d >= rg.lo && d < rg.lo + rg.bytes) return p.staging + rg.dev_off + uint64_t(d - rg.lo);
          fail("et: tensor '{}' of '{}' is neither resident nor staged", t.name, n.name);
        };
        const et::HartSet harts =
            dev_.options().fit_harts ? et::fit_harts(n, dev_.options().harts) : dev_.options().harts;
        DevAddr scratch = 0;
        if (uint64_t sb = et::scratch_bytes(n, en.kernel, harts)) {
          static const std::vector<uint8_t> zeros(1 << 16);
          for (uint64_t done = 0; done < sb; done += zeros.size())
            drv.copy_in(p.scratch + done, zeros.data(), std::min<uint64_t>(zeros.size(), sb - done));
          scratch = p.scratch;
        }
        et::KernelCall call = et::build_call(n, en.kernel, harts, addr, scratch);
        kernel = call.name;
        et::LaunchRequest rq;
        rq.code = dev_.code();
        rq.kernel = fmt::format("{} ({})", call.name, n.name);
        rq.harts = harts;
        rq.args = std::move(call.args);
        rq.cycle_budget = dev_.options().cycle_budget;
        if (hooks) t1 = phase_clock_ns();
        r = drv.run(rq);
        if (hooks) t2 = phase_clock_ns();
        ++st.launches;
        st.emulated_cycles += r.cycles;
        if (!r.ok()) fail("{}", r.describe());
        const uint8_t* o = static_cast<const uint8_t*>(n.data);
        for (const Region& rg : regions)
          if (o >= rg.lo && o < rg.lo + rg.bytes) {
            drv.copy_out(p.staging + rg.dev_off + uint64_t(o - rg.lo), n.data, n.nbytes());
            out_bytes = n.nbytes();
          }
        st.bytes_staged_in += in_bytes;
        st.bytes_staged_out += out_bytes;
        if (hooks) {
          int64_t t3 = phase_clock_ns();
          hooks->node_phase(dev_, n, "stage", t0, t1);
          hooks->node_phase(dev_, n, "launch", t1, t2);
          hooks->node_phase(dev_, n, "unstage", t2, t3);
          et::LaunchPerf lp = et::launch_perf(n, call.name, r, in_bytes, out_bytes);
          et::for_each_counter(lp, [&](const char* name, double v) { hooks->node_counter(dev_, n, name, v); });
        }
        ++st.nodes_run;
        done = true;
      } catch (const Error& e) {
        if (!p.fallback) throw;
        if (st.nodes_fallback == 0 || st.last_error.empty())
          std::fprintf(stderr, "et: '%s' failed on the device, the CPU runs it from now on: %s\n", n.name.c_str(),
                       e.what());
        st.last_error = e.what();
        en.faulted = true;
        kernel = "et-cpu-fallback";
      }
    }
    if (!done) {
      if (!p.fallback)
        fail("et: '{}' cannot run on the device ({}) and the segment has no host fallback", n.name, en.why_cpu);
      p.fallback->run(n);
      ++st.nodes_fallback;
    }
    if (hooks) hooks->after_node(dev_, n, kernel);
  }
}

std::unique_ptr<EtDevice> make_et_device(const EtOptions& options) { return std::make_unique<EtDevice>(options); }

}  // namespace opal
