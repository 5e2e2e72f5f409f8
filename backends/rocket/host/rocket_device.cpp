// The rocket Device, weight BufferType and Executor (see rocket_device.h).
#include "backends/rocket/host/rocket_device.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "backends/rocket/perf/perf_model.h"
#include "backends/rocket/scheme/hadamard.h"
#include "core/error.h"
#include "core/quant.h"

namespace opal {
namespace {

bool accepted_type(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::F16 || t == DType::BF16 || t == DType::F32;
}

// Host bytes of the GGUF weights plus the NPU copies made at upload.
class RocketWeightBuffer : public HostBuffer {
 public:
  RocketWeightBuffer(RocketWeightBufferType& t, uint64_t size) : HostBuffer(t, size), owner_(t) {}
  ~RocketWeightBuffer() override {
    for (auto& [t, w] : npu_) owner_.forget(t);
  }
  void keep(const Tensor* t, std::unique_ptr<rocket::NpuWeights> w) { npu_.emplace_back(t, std::move(w)); }

 private:
  RocketWeightBufferType& owner_;
  std::vector<std::pair<const Tensor*, std::unique_ptr<rocket::NpuWeights>>> npu_;
};

struct RocketNode {
  Tensor* node = nullptr;
  std::unique_ptr<rocket::NpuGemm> gemm;  // null: compile failed, the CPU runs it
};

struct RocketPlan : Plan {
  std::vector<RocketNode> nodes;
  HostFallback* fallback = nullptr;  // the scheduler's host path for a node the NPU cannot run
};

}  // namespace

Support rocket_drm_available(const std::string& device) {
#ifdef __linux__
  struct stat st {};
  if (stat("/dev/accel", &st) != 0)
    return Support::no(
        "no /dev/accel: the kernel has no DRM accel subsystem or no accel driver bound (Linux >= 6.18 "
        "with CONFIG_DRM_ACCEL_ROCKET and the NPU nodes enabled in the device tree)");
  if (stat(device.c_str(), &st) != 0)
    return Support::no(
        fmt::format("{} does not exist: the rocket driver is not loaded (modprobe rocket) or the "
                    "rknn-core nodes are disabled in the device tree",
                    device));
  if (!S_ISCHR(st.st_mode)) return Support::no(fmt::format("{} is not a character device", device));
  const int fd = open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return Support::no(fmt::format("cannot open {}: {}{}", device, std::strerror(errno),
                                   errno == EACCES ? " (add the user to the group owning it, e.g. render)" : ""));
  close(fd);
  return Support::yes();
#else
  return Support::no("the drm_accel driver needs Linux");
#endif
}

// ---- weights

std::unique_ptr<Buffer> RocketWeightBufferType::allocate(uint64_t size) {
  return std::make_unique<RocketWeightBuffer>(*this, size);
}

void RocketWeightBufferType::upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) {
  BufferType::upload_weight(t, host_bytes, buf, offset);  // the GGUF bytes, for the CPU
  auto* rbuf = dynamic_cast<RocketWeightBuffer*>(&buf);
  if (!rbuf || !accepted_type(t.type) || t.ne[2] != 1 || t.ne[3] != 1 || dev_.drivers().empty()) return;
  const int64_t K = t.ne[0], N = t.ne[1];
  if (K <= 0 || N <= 0 || K > (int64_t(1) << 24) || N > (int64_t(1) << 24)) return;
  // Requantize (after the optional rotation): scale = max|w| / 127 per row or per group.
  const rocket::QuantScheme scheme =
      rocket::make_scheme(unsigned(K), dev_.options().rotate, dev_.options().group, dev_.options().precision);
  const uint64_t rb = row_bytes(t.type, K);
  const rocket::QuantizedMatrix qm =
      rocket::quantize_matrix(unsigned(N), unsigned(K), scheme, [&](unsigned r, float* dst) {
        dequantize_row(t.type, static_cast<const uint8_t*>(host_bytes) + uint64_t(r) * rb, dst, K);
      });
  auto w = std::make_unique<rocket::NpuWeights>(dev_.drivers(), qm);
  npu_bytes_ += w->npu_bytes();
  npu_[&t] = w.get();
  rbuf->keep(&t, std::move(w));
}

const rocket::NpuWeights* RocketWeightBufferType::npu_weights(const Tensor& t) const {
  auto it = npu_.find(&t);
  return it == npu_.end() ? nullptr : it->second;
}

// ---- device

RocketDevice::RocketDevice(const RocketOptions& options) : RocketDevice(options, {}) {}

RocketDevice::RocketDevice(const RocketOptions& options, std::vector<std::unique_ptr<rocket::Driver>> drivers)
    : options_(options), drivers_(std::move(drivers)) {
  for (auto& d : drivers_) driver_ptrs_.push_back(d.get());
}

RocketDevice::~RocketDevice() = default;

std::string RocketDevice::description() const {
  return fmt::format("rocket (RK3588 NPU via {}, {} driver{}, MUL_MAT int8 ({}) for M >= {})",
                     drivers_.empty() ? options_.driver : drivers_.front()->name(), drivers_.size(),
                     drivers_.size() == 1 ? "" : "s", rocket::precision_name(options_.precision), options_.min_batch);
}

Support RocketDevice::supports_gemm(const Tensor& node, bool check_batch) const {
  if (node.op != Op::MulMat) return Support::no(fmt::format("rocket runs only MUL_MAT, not {}", op_name(node.op)));
  const Tensor* w = node.src[0];
  const Tensor* x = node.src[1];
  if (!w->is_leaf() || w->role != TensorRole::Weight) return Support::no("rocket multiplies by weights only");
  if (!accepted_type(w->type))
    return Support::no(
        fmt::format("weight type {}: rocket requantizes q8_0, q4_0, f16, bf16 and f32 to int8", dtype_name(w->type)));
  if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return Support::no("rocket: 2-D only");
  if (x->type != DType::F32 || !x->is_contiguous()) return Support::no("rocket: activations must be contiguous f32");
  if (!node.is_contiguous()) return Support::no("rocket: the output must be contiguous");
  if (w->buffer && !weights_.npu_weights(*w))
    return Support::no(fmt::format("weight '{}' has no NPU copy (held on {})", w->name, w->buffer->type().name()));
  const int64_t m = x->ne[1];
  if (check_batch && m < options_.min_batch)
    return Support::no(fmt::format("M={} < {} (rocket min batch): small batches (decode) run faster on the CPU", m,
                                   options_.min_batch));
  if (m > int64_t(rocket::kMaxGemmRows))
    return Support::no(fmt::format("M={} exceeds {} rows per NPU GEMM (use a smaller -ub)", m, rocket::kMaxGemmRows));
  return Support::yes();
}

Support RocketDevice::supports(const Tensor& node) const { return supports_gemm(node, true); }

DeviceStats RocketDevice::stats() const {
  DeviceStats d;
  d.values = {{"nodes_run", double(stats_.nodes_npu)},
              {"nodes_fallback", double(stats_.nodes_fallback)},
              {"plans_compiled", double(stats_.plans_compiled)},
              {"submits", double(stats_.submits)},
              {"jobs", double(stats_.jobs)},
              {"tasks", double(stats_.tasks)},
              {"predicted_s", stats_.predicted_s}};
  d.prediction.model = "RK3588 NPU, performance model: 3 cores at 1 GHz, docs/backends/rocket.md";
  d.prediction.scope = "matmuls the NPU ran; everything else (attention, norms, CPU fallbacks) is not modelled";
  d.prediction.nodes = "NPU matmuls";
  d.prediction.only = "matmul-only";
  return d;
}

Support RocketDevice::supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const {
  if (consumers.empty()) return Support::no("no op reads it");
  if (drivers_.empty()) return Support::no("rocket has no NPU driver");
  std::string first_reason;
  for (const Tensor* c : consumers) {
    if (c->op != Op::MulMat || c->src[0] != &weight) continue;
    Support s = supports_gemm(*c, false);
    if (s) return Support::yes();
    if (first_reason.empty()) first_reason = s.reason;
  }
  return Support::no(first_reason.empty() ? "rocket: no MUL_MAT reads it" : first_reason);
}

// ---- executor

std::unique_ptr<Plan> RocketExecutor::compile(const Segment& segment) {
  auto p = std::make_unique<RocketPlan>();
  p->fallback = dev_.options().fallback_to_cpu ? segment.fallback : nullptr;
  RocketStats& st = dev_.mutable_stats();
  for (Tensor* n : segment.nodes) {
    RocketNode rn;
    rn.node = n;
    const rocket::NpuWeights* w = dev_.weights().npu_weights(*n->src[0]);
    if (!w) fail("rocket: node '{}' reads weight '{}' without an NPU copy", n->name, n->src[0]->name);
    try {
      rn.gemm = std::make_unique<rocket::NpuGemm>(*w, unsigned(n->src[1]->ne[1]), scratch_, dev_.options().timeout_s);
    } catch (const Error& e) {
      if (!p->fallback) throw;
      st.last_error = e.what();
      std::fprintf(stderr, "rocket: cannot compile '%s' for the NPU, the CPU runs it: %s\n", n->name.c_str(), e.what());
    }
    p->nodes.push_back(std::move(rn));
  }
  ++st.plans_compiled;
  return p;
}

void RocketExecutor::run(Plan& plan, RunHooks* hooks) {
  auto& p = static_cast<RocketPlan&>(plan);
  RocketStats& st = dev_.mutable_stats();
  for (RocketNode& rn : p.nodes) {
    const Tensor& n = *rn.node;
    if (hooks) hooks->before_node(dev_, n);
    const char* kernel = "rocket-npu";
    bool done = false;
    if (rn.gemm) {
      try {
        const Tensor& x = *n.src[1];
        rn.gemm->run(static_cast<const float*>(x.data), x.ne[0], static_cast<float*>(n.data), n.ne[0],
                     hooks != nullptr);
        const rocket::GemmRunInfo& info = rn.gemm->last_run();
        if (hooks && info.timed)
          for (size_t i = 0; i < rocket::kGemmPhaseCount; ++i)
            hooks->node_phase(dev_, n, rocket::kGemmPhases[i], info.t_ns[i], info.t_ns[i + 1]);
        st.submits += info.submits;
        st.jobs += info.jobs;
        st.tasks += info.tasks;
        rocket::PerfParams board;
        board.precision = dev_.options().precision;
        st.predicted_s += rocket::predict_gemm(unsigned(x.n_rows()), unsigned(x.ne[0]), unsigned(n.ne[0]), board,
                                               dev_.options().group)
                              .seconds;
        ++st.nodes_npu;
        done = true;
      } catch (const Error& e) {
        if (!p.fallback) throw;
        if (st.nodes_fallback == 0)
          std::fprintf(stderr, "rocket: NPU failed on '%s', falling back to the CPU for it: %s\n", n.name.c_str(),
                       e.what());
        st.last_error = e.what();
      }
    }
    if (!done) {
      if (!p.fallback) fail("rocket: no NPU program for '{}' and no host fallback for this segment", n.name);
      p.fallback->run(*rn.node);
      kernel = "rocket-cpu-fallback";
      ++st.nodes_fallback;
    }
    if (hooks) hooks->after_node(dev_, n, kernel);
  }
}

std::unique_ptr<RocketDevice> make_rocket_device(const RocketOptions& options) {
  std::vector<std::unique_ptr<rocket::Driver>> drivers;
  if (options.driver == "emulator") {
    const unsigned cores = options.cores ? options.cores : 1;
    if (cores > 3) fail("rocket: {} emulated NPU cores requested (1..3)", cores);
    for (unsigned i = 0; i < cores; ++i) drivers.push_back(std::make_unique<rocket::EmulatorDriver>(options.emulator));
  } else if (options.driver == "drm_accel" || options.driver == "drm") {
    const Support s = rocket_drm_available(options.device);
    if (!s) fail("rocket: the drm_accel backend is unavailable: {}", s.reason);
    rocket::DriverOptions d;
    d.kind = "drm_accel";
    d.device = options.device;
    d.cores = options.cores ? options.cores : 3;
    drivers = rocket::open_drivers(d);
  } else {
    fail("rocket: unknown driver '{}' (emulator, drm_accel)", options.driver);
  }
  return std::make_unique<RocketDevice>(options, std::move(drivers));
}

}  // namespace opal
