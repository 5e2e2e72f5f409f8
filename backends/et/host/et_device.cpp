// The ET Device, weight BufferType and Executor (see et_device.h).
#include "backends/et/host/et_device.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "backends/et/abi/et_kernel_abi.h"
#include "backends/et/driver/elf_image.h"
#include "backends/et/kernels/et_kernel_images.h"
#include "backends/et/lower/lower.h"
#include "backends/et/perf/et_cost_model.h"
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
  double node_s = 0;     // the card model's time of its last launch, launch cost left out
};

struct EtPlan : Plan {
  et::Driver* driver = nullptr;
  DevAddr staging = 0;
  uint64_t staging_bytes = 0;
  DevAddr scratch = 0;  // zeroed before each launch that uses it (lower.h scratch_bytes)
  uint64_t scratch_bytes = 0;
  std::vector<EtNode> nodes;
  HostFallback* fallback = nullptr;
  // Fused dispatch: the mirror of the group's tensors, scratch, sync and
  // stats (fused), the sub-ops' blobs and the command list (commands).
  DevAddr fused = 0, commands = 0;
  uint64_t fused_bytes = 0, commands_bytes = 0;
  bool no_fusion = false;  // a fused launch failed where no sub-op could be named
  ~EtPlan() override {
    if (staging) driver->free(staging);
    if (scratch) driver->free(scratch);
    if (fused) driver->free(fused);
    if (commands) driver->free(commands);
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
  et::KernelChoice k = et::choose_kernel(node, options_.tensor_rows);
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
              {"weight_bytes", double(weights_.device_bytes())},
              {"fused_launches", double(stats_.fused_launches)},
              {"sub_ops", double(stats_.sub_ops)},
              {"barriers", double(stats_.barriers)},
              {"predicted_s", stats_.predicted_s},
              {"roofline_s", stats_.roofline_s},
              {"shapes_emulated", double(stats_.shapes_emulated)},
              {"nodes_predicted", double(stats_.nodes_predicted)}};
  d.prediction.model = et::card_model_description();
  d.prediction.scope =
      "nodes run on ET: per node max(emulated instructions / (minions its split uses x clock), bytes / bandwidth), "
      "plus each launch and fused barrier; host staging and CPU nodes not modelled";
  if (options_.predict_by_shape)
    d.prediction.scope +=
        "; predicted by shape: each distinct node shape emulated once (op by op), repeats charged its time";
  d.prediction.nodes = "ET nodes";
  d.prediction.only = "ET-only";
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
    et::KernelChoice k = et::choose_kernel(*n, dev_.options().tensor_rows);
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

namespace {

// One node op by op: stage its sources, launch, copy its output back (or the CPU).
// `charge_launch`: the card model counts its launch (false when prediction by
// shape composes it into a fused launch).
void run_node(EtDevice& dev, EtPlan& p, EtNode& en, RunHooks* hooks, bool charge_launch = true) {
  EtStats& st = dev.mutable_stats();
  et::Driver& drv = dev.driver();
  Tensor& n = *en.node;
  if (hooks) hooks->before_node(dev, n);
  const char* kernel = "et-cpu-fallback";
  bool done = false;
  if (en.kernel && !en.faulted) {
    std::string error;
    et::LaunchResult r;
    int64_t t0 = hooks ? phase_clock_ns() : 0, t1 = 0, t2 = 0;
    uint64_t in_bytes = 0, out_bytes = 0;
    try {
      uint64_t total = 0;
      std::vector<Region> regions = regions_of(n, dev.weights(), &total);
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
        if (DevAddr w = dev.weights().device_address(*s)) return w + uint64_t(d - static_cast<const uint8_t*>(s->data));
        for (const Region& rg : regions)
          if (d >= rg.lo && d < rg.lo + rg.bytes) return p.staging + rg.dev_off + uint64_t(d - rg.lo);
        fail("et: tensor '{}' of '{}' is neither resident nor staged", t.name, n.name);
      };
      const et::HartSet harts = dev.options().fit_harts ? et::fit_harts(n, dev.options().harts) : dev.options().harts;
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
      rq.code = dev.code();
      rq.kernel = fmt::format("{} ({})", call.name, n.name);
      rq.harts = harts;
      rq.args = std::move(call.args);
      rq.cycle_budget = dev.options().cycle_budget;
      rq.scratchpad = et::uses_tensor_unit(en.kernel);
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
      en.node_s = et::predict_node_s(n, r.hart_cycles, en.kernel);
      st.predicted_s += (charge_launch ? et::card_model().launch_s : 0.0) + en.node_s;
      st.roofline_s += et::roofline_node_s(n);
      if (hooks) {
        int64_t t3 = phase_clock_ns();
        hooks->node_phase(dev, n, "stage", t0, t1);
        hooks->node_phase(dev, n, "launch", t1, t2);
        hooks->node_phase(dev, n, "unstage", t2, t3);
        et::LaunchPerf lp = et::launch_perf(n, call.name, r, in_bytes, out_bytes);
        et::for_each_counter(lp, [&](const char* name, double v) { hooks->node_counter(dev, n, name, v); });
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
  if (hooks) hooks->after_node(dev, n, kernel);
}

// ---- fused dispatch (kernels/fused.c, et_kernel_abi.h EtFusedArgs)

struct Span {
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
};

// The whole 64-byte lines of a span: two minions must not write one line in
// one phase, so conflicts are decided per line.
Span lines_of(Span s) {
  auto down = [](const uint8_t* p) { return p - (reinterpret_cast<uintptr_t>(p) & 63); };
  return {down(s.lo), down(s.hi + 63)};
}

bool overlaps_any(const Span& a, const std::vector<Span>& v) {
  for (const Span& b : v)
    if (a.lo < b.hi && b.lo < a.hi) return true;
  return false;
}

// What node `n`'s kernel reads in host memory (its non-weight sources, with
// their storage tensors) and writes (its output).
struct NodeIo {
  std::vector<Span> reads;
  std::vector<const Tensor*> read_storage;
  Span write;
};

NodeIo node_io(const Tensor& n, const EtWeightBufferType& wts) {
  NodeIo io;
  for (const Tensor* s : et::kernel_sources(n)) {
    const Tensor* stg = s->storage();
    if (stg->is_leaf() && wts.device_address(*stg)) continue;  // resident weight: never written
    const uint8_t* d = static_cast<const uint8_t*>(s->data);
    if (!d) fail("et: source '{}' of '{}' has no memory", s->name, n.name);
    io.reads.push_back({d, d + s->nbytes()});
    io.read_storage.push_back(stg);
  }
  const uint8_t* o = static_cast<const uint8_t*>(n.data);
  if (!o) fail("et: node '{}' has no memory", n.name);
  io.write = {o, o + n.nbytes()};
  return io;
}

// The 64-byte lines earlier sub-ops (of one phase, or of one fused group)
// read and wrote.
struct LineSet {
  std::vector<Span> r, w;
  // Whether a sub-op reading `reads` and writing `write` meets them: it writes
  // a line read before (write after read: the planner reuses memory) or
  // written before (write after write), or with `raw` reads a line written
  // before (read after write).
  bool conflicts(const std::vector<Span>& reads, const Span& write, bool raw) const {
    const Span wl = lines_of(write);
    if (overlaps_any(wl, r) || overlaps_any(wl, w)) return true;
    if (raw)
      for (const Span& s : reads)
        if (overlaps_any(lines_of(s), w)) return true;
    return false;
  }
  void add(const std::vector<Span>& reads, const Span& write) {
    for (const Span& s : reads) r.push_back(lines_of(s));
    w.push_back(lines_of(write));
  }
  void clear() {
    r.clear();
    w.clear();
  }
};

void zero_device(et::Driver& drv, DevAddr a, uint64_t n) {
  static const std::vector<uint8_t> zeros(1 << 16);
  for (uint64_t done = 0; done < n; done += zeros.size())
    drv.copy_in(a + done, zeros.data(), std::min<uint64_t>(zeros.size(), n - done));
}

// Reallocates `*a` when `*bytes` is below `need`.
void ensure(et::Driver& drv, DevAddr* a, uint64_t* bytes, uint64_t need) {
  if (*bytes >= need) return;
  if (*a) drv.free(*a);
  *a = drv.alloc(need);
  *bytes = need;
}

// Hart id of rank `rank` in `h` (the inverse of et_hart_rank).
int hart_of_rank(const et::HartSet& h, uint32_t rank) {
  for (unsigned s = 0; s < 64; ++s) {
    if (!((h.shire_mask >> s) & 1)) continue;
    for (unsigned m = 0; m < 32; ++m) {
      if (!((h.minion_mask >> m) & 1)) continue;
      for (unsigned t = 0; t < h.threads; ++t) {
        const uint64_t id = s * 64 + m * 2 + t;
        if (et_hart_rank(id, h.shire_mask, h.minion_mask, h.threads) == rank) return int(id);
      }
    }
  }
  return -1;
}

struct FusedOp {
  size_t node = 0;  // index in the plan
  std::vector<Span> reads;
  Span write;
  et::HartSet harts;
  uint64_t scratch_off = 0, scratch_bytes = 0;
  std::vector<uint8_t> blob;
  const char* name = "";
  uint32_t entry = 0;  // its command-list entry
};

// Runs plan nodes [first, last) (all with a kernel, none faulted) as one
// fused launch. Returns false after a failure that falls back: the node that
// failed is marked for the CPU and the caller runs the group op by op.
bool run_fused(EtDevice& dev, EtPlan& p, size_t first, size_t last, RunHooks* hooks) {
  EtStats& st = dev.mutable_stats();
  et::Driver& drv = dev.driver();
  const EtOptions& opt = dev.options();
  const EtWeightBufferType& wts = dev.weights();
  // The launch's wall time belongs to the group's first node (its perf line
  // carries the phases and the launch's cycles).
  if (hooks) hooks->before_node(dev, *p.nodes[first].node);
  const int64_t t0 = hooks ? phase_clock_ns() : 0;

  // What each sub-op reads and writes in host memory; what must be copied in
  // (bytes no earlier node of the group produces).
  std::vector<FusedOp> ops(last - first);
  std::vector<Span> all, copy_in;
  std::set<const Tensor*> produced;
  for (size_t k = 0; k < ops.size(); ++k) {
    FusedOp& op = ops[k];
    op.node = first + k;
    const Tensor& n = *p.nodes[op.node].node;
    NodeIo io = node_io(n, wts);
    for (size_t s = 0; s < io.reads.size(); ++s) {
      all.push_back(io.reads[s]);
      if (!produced.count(io.read_storage[s])) copy_in.push_back(io.reads[s]);
    }
    op.reads = std::move(io.reads);
    op.write = io.write;
    all.push_back(op.write);
    if (et::writes_in_place(n)) copy_in.push_back(op.write);  // it writes part of it
    else produced.insert(&n);
  }

  // The mirror: every span at its host layout, overlapping spans merged.
  std::sort(all.begin(), all.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  std::vector<Region> mirror;
  const uint8_t* hi = nullptr;
  for (const Span& s : all) {
    if (!mirror.empty() && s.lo < hi) {
      hi = std::max(hi, s.hi);
      mirror.back().bytes = uint64_t(hi - mirror.back().lo);
      continue;
    }
    mirror.push_back({s.lo, uint64_t(s.hi - s.lo), 0, false});
    hi = s.hi;
  }
  uint64_t off = 0;
  for (Region& r : mirror) {
    off = align_to(off, 64) + (reinterpret_cast<uintptr_t>(r.lo) & 63);
    r.dev_off = off;
    off += r.bytes;
  }
  const uint64_t mirror_bytes = align_to(off, 64);

  // Harts and scratch per sub-op; then the data area: mirror, scratch, sync, stats.
  const et::HartSet all_harts = opt.harts;
  uint64_t scratch_total = 0;
  for (FusedOp& op : ops) {
    const EtNode& en = p.nodes[op.node];
    op.harts = opt.fit_harts ? et::fit_harts(*en.node, all_harts) : all_harts;
    op.scratch_bytes = et::scratch_bytes(*en.node, en.kernel, op.harts);
    op.scratch_off = scratch_total;
    scratch_total += align_to(op.scratch_bytes, 64);
  }
  uint64_t n_entries_max = 0;  // sub-ops, barriers and evicts (at most one per span)
  for (const FusedOp& op : ops) n_entries_max += 3 + op.reads.size();
  const uint64_t scratch_at = mirror_bytes, sync_at = scratch_at + scratch_total;
  const uint64_t stats_at = sync_at + 64 * (1 + uint64_t(all_harts.count()));
  ensure(drv, &p.fused, &p.fused_bytes, stats_at + 64 * n_entries_max);
  const DevAddr base = p.fused;
  auto dev_of = [&](const uint8_t* d) -> DevAddr {
    for (const Region& rg : mirror)
      if (d >= rg.lo && d < rg.lo + rg.bytes) return base + rg.dev_off + uint64_t(d - rg.lo);
    return 0;
  };
  auto addr = [&](const Tensor& t) -> DevAddr {
    const Tensor* s = t.storage();
    const uint8_t* d = static_cast<const uint8_t*>(t.data);
    if (DevAddr w = wts.device_address(*s)) return w + uint64_t(d - static_cast<const uint8_t*>(s->data));
    if (DevAddr a = dev_of(d)) return a;
    fail("et: tensor '{}' is neither resident nor mirrored", t.name);
  };

  // The command list: a barrier wherever a sub-op's lines meet lines that an
  // earlier sub-op of the phase wrote (read after write, write after write)
  // or read (write after read: the planner reuses memory).
  std::vector<EtFusedEntry> entries;
  std::vector<uint8_t> blobs;
  LineSet phase;
  std::vector<Span> phase_touched;
  uint32_t n_barriers = 0;
  // The end of a phase: EVICT of every byte it read or wrote (merged), then a
  // BARRIER (see et_kernel_abi.h EtFusedArgs).
  auto end_phase = [&](uint32_t node) {
    std::sort(phase_touched.begin(), phase_touched.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
    std::vector<Span> merged;
    for (const Span& s : phase_touched)
      if (!merged.empty() && s.lo < merged.back().hi) merged.back().hi = std::max(merged.back().hi, s.hi);
      else merged.push_back(s);
    for (const Span& s : merged) {
      EtFusedEntry v{};
      v.kind = ET_FUSED_EVICT;
      v.node = node;
      v.addr = dev_of(s.lo);
      v.bytes = uint64_t(s.hi - s.lo);
      entries.push_back(v);
    }
    EtFusedEntry b{};
    b.kind = ET_FUSED_BARRIER;
    b.node = node;
    entries.push_back(b);
    phase.clear();
    phase_touched.clear();
  };
  for (size_t k = 0; k < ops.size(); ++k) {
    FusedOp& op = ops[k];
    const EtNode& en = p.nodes[op.node];
    const Tensor& n = *en.node;
    if (int(op.node) == opt.fault_node) {  // test seam (EtOptions::fault_node)
      EtTestFaultArgs f{};
      f.h.abi_version = ET_ABI_VERSION;
      f.h.kernel_id = ET_K_TEST_FAULT;
      f.h.shire_mask = op.harts.shire_mask;
      f.h.minion_mask = op.harts.minion_mask;
      f.h.threads = op.harts.threads;
      f.h.blob_bytes = sizeof f;
      f.mode = opt.fault_mode;
      f.status = ET_STATUS_BAD_SHAPE;
      f.detail = 7;
      op.blob.resize(sizeof f);
      std::memcpy(op.blob.data(), &f, sizeof f);
      op.name = "test_fault";
    } else {
      et::KernelCall call =
          et::build_call(n, en.kernel, op.harts, addr, op.scratch_bytes ? base + scratch_at + op.scratch_off : 0);
      op.blob = std::move(call.args);
      op.name = call.name;
    }
    if (phase.conflicts(op.reads, op.write, true)) {
      end_phase(uint32_t(op.node));
      ++n_barriers;
    }
    phase.add(op.reads, op.write);
    for (const Span& r : op.reads) phase_touched.push_back(r);
    phase_touched.push_back(op.write);
    EtFusedEntry e{};
    e.kind = ET_FUSED_SUB_OP;
    e.node = uint32_t(op.node);
    e.args = blobs.size();  // an offset until the command area is placed
    op.entry = uint32_t(entries.size());
    entries.push_back(e);
    blobs.insert(blobs.end(), op.blob.begin(), op.blob.end());
    blobs.resize(align_to(blobs.size(), 64));
  }
  const uint64_t entries_at = blobs.size();
  ensure(drv, &p.commands, &p.commands_bytes, entries_at + entries.size() * sizeof(EtFusedEntry));
  for (EtFusedEntry& e : entries)
    if (e.kind == ET_FUSED_SUB_OP) e.args += p.commands;
  drv.copy_in(p.commands, blobs.data(), blobs.size());
  drv.copy_in(p.commands + entries_at, entries.data(), entries.size() * sizeof(EtFusedEntry));

  uint64_t in_bytes = 0;
  for (const Span& s : copy_in) {
    drv.copy_in(dev_of(s.lo), s.lo, uint64_t(s.hi - s.lo));
    in_bytes += uint64_t(s.hi - s.lo);
  }
  zero_device(drv, base + scratch_at, stats_at + 64 * entries.size() - scratch_at);

  EtFusedArgs a{};
  a.h.abi_version = ET_ABI_VERSION;
  a.h.kernel_id = ET_K_FUSED;
  a.h.shire_mask = all_harts.shire_mask;
  a.h.minion_mask = all_harts.minion_mask;
  a.h.threads = all_harts.threads;
  a.h.blob_bytes = sizeof a;
  a.entries = p.commands + entries_at;
  a.count = uint32_t(entries.size());
  a.evict_level = std::popcount(all_harts.shire_mask) > 1 ? 2 : 1;  // L3 across shires, else L2
  a.sync = base + sync_at;
  a.stats = base + stats_at;
  a.barrier_budget = opt.barrier_budget ? opt.barrier_budget : opt.cycle_budget;
  et::LaunchRequest rq;
  rq.code = dev.code();
  rq.kernel = fmt::format("fused ({} sub-ops, '{}' .. '{}')", ops.size(), p.nodes[first].node->name,
                          p.nodes[last - 1].node->name);
  rq.harts = all_harts;
  rq.args.resize(sizeof a);
  std::memcpy(rq.args.data(), &a, sizeof a);
  const uint64_t cap = ~0ull / 4;
  rq.cycle_budget = opt.cycle_budget > cap / ops.size() ? cap : opt.cycle_budget * ops.size();
  for (const FusedOp& op : ops) rq.scratchpad |= et::uses_tensor_unit(p.nodes[op.node].kernel);
  const int64_t t1 = hooks ? phase_clock_ns() : 0;
  const et::LaunchResult r = drv.run(rq);
  const int64_t t2 = hooks ? phase_clock_ns() : 0;
  ++st.launches;
  ++st.fused_launches;
  st.emulated_cycles += r.cycles;

  if (!r.ok()) {
    // Which sub-op, node and hart: the failing hart's EtFusedHart, or for a
    // barrier past its budget the first hart that never arrived.
    std::vector<EtFusedHart> harts(all_harts.count());
    drv.copy_out(base + sync_at + 64, harts.data(), harts.size() * sizeof(EtFusedHart));
    int hart = r.hart;
    std::string what;
    if (r.status == et::LaunchStatus::KernelFailed && r.device_status == ET_STATUS_BARRIER_TIMEOUT &&
        r.device_detail < entries.size()) {
      uint32_t b = 0;
      for (uint32_t i = 0; i <= r.device_detail; ++i) b += entries[i].kind == ET_FUSED_BARRIER;
      for (uint32_t rank = 0; rank < harts.size(); ++rank)
        if (harts[rank].arrived < b) {
          hart = hart_of_rank(all_harts, rank);
          break;
        }
      what = fmt::format(
          "the barrier before '{}' waited past its budget of {} cycles (hart {} timed out there): hart {} "
          "never arrived",
          p.nodes[entries[r.device_detail].node].node->name, a.barrier_budget, r.hart, hart);
    } else {
      what = r.describe();
    }
    const FusedOp* bad = nullptr;
    if (hart >= 0) {
      const uint32_t rank =
          et_hart_rank(uint64_t(hart), all_harts.shire_mask, all_harts.minion_mask, all_harts.threads);
      if (rank < harts.size() && harts[rank].entry > 0)
        for (const FusedOp& op : ops)
          if (op.entry + 1 == harts[rank].entry) bad = &op;
    }
    const std::string msg =
        bad ? fmt::format("et: fused launch of {} sub-ops failed in sub-op {} '{}' (node '{}') on hart {}: {}",
                          ops.size(), bad->node - first, bad->name, p.nodes[bad->node].node->name, hart, what)
            : fmt::format("et: fused launch of {} sub-ops ('{}' .. '{}') failed (sub-op unknown, hart {}): {}",
                          ops.size(), p.nodes[first].node->name, p.nodes[last - 1].node->name, hart, what);
    if (hooks) hooks->after_node(dev, *p.nodes[first].node, "et-fused-failed");
    if (!p.fallback) fail("{} (run again with --et-fusion off to isolate it)", msg);
    std::fprintf(stderr, "%s; the CPU runs that node from now on, the rest op by op\n", msg.c_str());
    st.last_error = msg;
    if (bad) p.nodes[bad->node].faulted = true;
    else p.no_fusion = true;
    return false;
  }

  uint64_t out_bytes = 0;
  for (const FusedOp& op : ops) {
    drv.copy_out(dev_of(op.write.lo), const_cast<uint8_t*>(op.write.lo), uint64_t(op.write.hi - op.write.lo));
    out_bytes += uint64_t(op.write.hi - op.write.lo);
  }
  st.sub_ops += ops.size();
  st.barriers += n_barriers;
  st.nodes_run += ops.size();
  st.bytes_staged_in += in_bytes;
  st.bytes_staged_out += out_bytes;
  std::vector<uint64_t> insns(entries.size() * 8);
  drv.copy_out(base + stats_at, insns.data(), insns.size() * sizeof(uint64_t));
  st.predicted_s += et::card_model().launch_s + n_barriers * et::card_model().barrier_s;
  for (const FusedOp& op : ops) {
    uint64_t work = insns[op.entry * 8];  // the sub-op and the evicts before it; not the barrier's spinning
    uint32_t i = op.entry;
    if (i > 0 && entries[i - 1].kind == ET_FUSED_BARRIER) --i;
    for (; i > 0 && entries[i - 1].kind == ET_FUSED_EVICT; --i) work += insns[(i - 1) * 8];
    st.predicted_s += et::predict_node_s(*p.nodes[op.node].node, work, p.nodes[op.node].kernel);
    st.roofline_s += et::roofline_node_s(*p.nodes[op.node].node);
  }
  if (hooks) {
    const int64_t t3 = phase_clock_ns();
    for (size_t k = 0; k < ops.size(); ++k) {
      const FusedOp& op = ops[k];
      Tensor& n = *p.nodes[op.node].node;
      if (k > 0) hooks->before_node(dev, n);
      if (k == 0) {
        hooks->node_phase(dev, n, "stage", t0, t1);
        hooks->node_phase(dev, n, "launch", t1, t2);
        hooks->node_phase(dev, n, "unstage", t2, t3);
      }
      et::LaunchResult sub;
      sub.cycles = k == 0 ? r.cycles : 0;
      sub.harts = op.harts.count();
      sub.hart_cycles = insns[op.entry * 8];
      // the evicts and the barrier before a sub-op are its cost too
      for (uint32_t i = op.entry; i > 0 && entries[i - 1].kind != ET_FUSED_SUB_OP; --i)
        sub.hart_cycles += insns[(i - 1) * 8];
      sub.kernel_cycles = sub.harts ? sub.hart_cycles / sub.harts : 0;
      et::LaunchPerf lp = et::launch_perf(n, op.name, sub, k == 0 ? in_bytes : 0, k == 0 ? out_bytes : 0);
      lp.launches = k == 0 ? 1 : 0;
      et::for_each_counter(lp, [&](const char* name, double v) { hooks->node_counter(dev, n, name, v); });
      hooks->after_node(dev, n, op.name);
    }
  }
  return true;
}

// The end of the fused group starting at plan node `i`: the run of nodes with
// a kernel (none faulted). With `keep_io` (hooks that read a node's memory in
// after_node: --shadow) the group also ends before a node that writes a line
// an earlier node of the group read or wrote: a fused launch reports its nodes
// after the whole launch, when the planner's reuse of that memory would
// already have overwritten an earlier node's sources or output.
size_t fused_group_end(EtDevice& dev, const EtPlan& p, size_t i, bool keep_io) {
  size_t j = i;
  LineSet group;
  while (j < p.nodes.size() && p.nodes[j].kernel && !p.nodes[j].faulted) {
    if (keep_io) {
      const NodeIo io = node_io(*p.nodes[j].node, dev.weights());
      if (j > i && group.conflicts(io.reads, io.write, false)) break;
      group.add(io.reads, io.write);
    }
    ++j;
  }
  return j;
}

// The barriers a fused launch of plan nodes [first, last) has (run_fused's phases).
uint32_t fused_barriers(EtDevice& dev, const EtPlan& p, size_t first, size_t last) {
  LineSet phase;
  uint32_t barriers = 0;
  for (size_t k = first; k < last; ++k) {
    const NodeIo io = node_io(*p.nodes[k].node, dev.weights());
    if (phase.conflicts(io.reads, io.write, true)) {
      ++barriers;
      phase.clear();
    }
    phase.add(io.reads, io.write);
  }
  return barriers;
}

// What makes two nodes the same work for the card model: kernel, op, types,
// shapes, strides, parameters, which sources are resident weights, harts.
std::string shape_key(EtDevice& dev, const Tensor& n, uint32_t kernel) {
  const et::HartSet h = dev.options().fit_harts ? et::fit_harts(n, dev.options().harts) : dev.options().harts;
  std::string k = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{:x}.{:x}.{}", kernel, int(n.op), int(n.type),
                              fmt::join(n.ne, ","), fmt::join(n.nb, ","), fmt::join(n.iparams, ","),
                              fmt::join(n.fparams, ","), n.view_offset % 64, h.shire_mask, h.minion_mask, h.threads);
  for (const Tensor* s : n.src) {
    if (!s) continue;
    const Tensor* st = s->storage();
    k += fmt::format("|{}:{}:{}:{}", int(s->type), fmt::join(s->ne, ","), fmt::join(s->nb, ","),
                     st->is_leaf() && dev.weights().device_address(*st) ? 'w' : 'a');
  }
  return k;
}

// Prediction by shape (EtOptions::predict_by_shape): the first node of each
// distinct shape_key runs on the device op by op and its card-model time is
// kept; a later node of that shape runs on the CPU (the segment's fallback)
// and is charged the kept time. Launches and barriers are charged as the run
// would launch them: fused, one launch per group plus its phases' barriers.
void run_predicted(EtDevice& dev, EtPlan& p, RunHooks* hooks) {
  EtStats& st = dev.mutable_stats();
  const et::CardModel& m = et::card_model();
  if (!p.fallback)
    fail("et: prediction by shape runs repeated shapes on the CPU, and this segment has no host fallback");
  const bool fuse = dev.options().fusion && dev.kernels().count(ET_K_FUSED);
  size_t i = 0;
  while (i < p.nodes.size()) {
    size_t j = fuse ? fused_group_end(dev, p, i, false) : i;
    const bool group = j - i >= 2;
    if (group) {
      const uint32_t b = fused_barriers(dev, p, i, j);
      st.predicted_s += m.launch_s + b * m.barrier_s;
      st.barriers += b;
    } else {
      j = i + 1;
    }
    for (size_t k = i; k < j; ++k) {
      EtNode& en = p.nodes[k];
      Tensor& n = *en.node;
      if (!en.kernel || en.faulted) {
        run_node(dev, p, en, hooks, !group);
        continue;
      }
      const std::string key = shape_key(dev, n, en.kernel);
      auto& kept = dev.shape_predictions();
      auto it = kept.find(key);
      if (it == kept.end()) {
        run_node(dev, p, en, hooks, !group);
        if (!en.faulted) kept[key] = en.node_s;
        ++st.shapes_emulated;
        continue;
      }
      if (hooks) hooks->before_node(dev, n);
      p.fallback->run(n);
      st.predicted_s += (group ? 0.0 : m.launch_s) + it->second;
      st.roofline_s += et::roofline_node_s(n);
      ++st.nodes_run;
      ++st.nodes_predicted;
      if (hooks) hooks->after_node(dev, n, "et-predicted-by-shape");
    }
    i = j;
  }
}

}  // namespace

void EtExecutor::run(Plan& plan, RunHooks* hooks) {
  auto& p = static_cast<EtPlan&>(plan);
  std::lock_guard lock(launch_mutex());
  if (dev_.options().predict_by_shape) {
    run_predicted(dev_, p, hooks);
    return;
  }
  const bool fuse = dev_.options().fusion && dev_.kernels().count(ET_K_FUSED) && !p.no_fusion;
  const bool keep_io = hooks && hooks->reads_node_memory();
  size_t i = 0;
  while (i < p.nodes.size()) {
    const size_t j = fuse ? fused_group_end(dev_, p, i, keep_io) : i;
    if (j - i >= 2) {
      if (!run_fused(dev_, p, i, j, hooks))
        for (size_t k = i; k < j; ++k) run_node(dev_, p, p.nodes[k], hooks);
      i = j;
      continue;
    }
    run_node(dev_, p, p.nodes[i], hooks);
    ++i;
  }
}

std::unique_ptr<EtDevice> make_et_device(const EtOptions& options) { return std::make_unique<EtDevice>(options); }

}  // namespace opal
