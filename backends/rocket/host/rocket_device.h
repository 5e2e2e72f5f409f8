// The rocket backend's host glue (the shape of backends/test_accel): a Device
// that runs MUL_MAT on the RK3588 NPU through the driver seam (emulator or the
// mainline drm_accel driver).
//   - supports(): MUL_MAT of a 2-D weight (q8_0, q4_0, f16, bf16, f32) by
//     contiguous f32 activations with at least `min_batch` rows (decode's
//     M = 1 GEMV is bandwidth-bound and faster on the CPU); reasons otherwise.
//   - weights: the weight BufferType is host memory holding the GGUF bytes
//     unchanged (so the CPU runs the small-batch matmuls on the same weight in
//     place, no copies), and at upload also requantizes the weight per output
//     row to int8 (scale = max|w| / 127; with `precision` w16*, a second
//     residual int8 plane) and packs it into resident NPU BOs, N split across
//     the cores (host/npu_gemm.h).
//   - the Executor compiles each MUL_MAT of a segment once per shape bucket
//     (tiling + regcmd streams), then per run quantizes activations per row,
//     submits, waits, dequantizes. A driver error, PREP timeout or untouched
//     output sentinel makes that node fall back to the CPU kernel (counted,
//     reported once on stderr). RunHooks are called around every node, and
//     with hooks each NPU node reports its phases (prepare, submit, wait,
//     unpack: host/npu_gemm.h kGemmPhases) through RunHooks::node_phase.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/rocket/driver/driver.h"
#include "backends/rocket/driver/emulator/npu_emulator.h"
#include "backends/rocket/host/npu_gemm.h"
#include "graph/backend.h"
#include "graph/host_buffer.h"

namespace opal {

struct RocketOptions {
  std::string driver = "emulator";           // "emulator" or "drm_accel"
  std::string device = "/dev/accel/accel0";  // drm_accel node
  unsigned cores = 0;                        // drivers (NPU cores) to split N over; 0 = emulator 1, drm_accel 3
  int64_t min_batch = 32;                    // fewer activation rows (M) -> the CPU runs the node
  double timeout_s = 2.0;                    // PREP_BO deadline per submit (the kernel's job timeout is 0.5 s)
  int priority = 50;
  bool fallback_to_cpu = true;  // on a fault; false: the error propagates
  bool rotate = true;           // block-Hadamard rotation of K before int8 (scheme/hadamard.h)
  unsigned group = 0;           // K channels per int8 scale (multiple of 32); 0 = one per row
  // int8 planes per operand: w16a16 (default: hi + lo planes for both, 3 int8
  // GEMMs per matmul, meets the q8_0 logit bar on every golden model), w8a16,
  // w16a8 (2 GEMMs), w8a8 (1 GEMM, fastest; tiny-qwen3 misses the bar).
  rocket::Precision precision = rocket::kDefaultPrecision;
  rocket::EmulatorOptions emulator;  // emulator numerics / strictness
};

// Whether the real driver can be used here; the reason names what is missing.
Support rocket_drm_available(const std::string& device = "/dev/accel/accel0");

class RocketDevice;

// Host memory with the GGUF bytes; NPU copies live beside it (per tensor).
class RocketWeightBufferType : public BufferType {
 public:
  explicit RocketWeightBufferType(RocketDevice& dev) : dev_(dev) {}
  std::string name() const override { return "rocket"; }
  bool host_visible() const override { return true; }
  std::unique_ptr<Buffer> allocate(uint64_t size) override;
  void upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) override;
  // The NPU copy of a weight uploaded here, or null.
  const rocket::NpuWeights* npu_weights(const Tensor& t) const;
  void forget(const Tensor* t) { npu_.erase(t); }
  uint64_t npu_bytes() const { return npu_bytes_; }

 private:
  RocketDevice& dev_;
  std::map<const Tensor*, const rocket::NpuWeights*> npu_;
  uint64_t npu_bytes_ = 0;
};

struct RocketStats {
  uint64_t nodes_npu = 0, nodes_fallback = 0, plans_compiled = 0;
  uint64_t submits = 0, jobs = 0, tasks = 0;
  // What the performance model (perf/perf_model.h, default parameters: 3 cores
  // at 1 GHz) predicts the RK3588 would spend on the matmuls run on the NPU.
  double predicted_s = 0;
  std::string last_error;
};

class RocketExecutor : public Executor {
 public:
  explicit RocketExecutor(RocketDevice& dev) : dev_(dev) {}
  std::unique_ptr<Plan> compile(const Segment& segment) override;
  void run(Plan& plan, RunHooks* hooks) override;

 private:
  RocketDevice& dev_;
  rocket::ScratchPool scratch_;
};

class RocketDevice : public Device {
 public:
  explicit RocketDevice(const RocketOptions& options);
  // With given drivers (tests inject faulty ones).
  RocketDevice(const RocketOptions& options, std::vector<std::unique_ptr<rocket::Driver>> drivers);
  ~RocketDevice() override;

  std::string name() const override { return "rocket"; }
  std::string description() const override;
  DeviceRole role() const override { return DeviceRole::Accelerator; }
  int priority() const override { return options_.priority; }
  Support supports(const Tensor& node) const override;
  // A weight may live here if some consumer is a MUL_MAT the NPU can run at
  // a large enough batch; other consumers run on the CPU, reading it in place.
  Support supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const override;
  BufferType& weight_buffer_type() override { return weights_; }
  BufferType& compute_buffer_type() override { return compute_; }
  Executor& executor() override { return executor_; }

  const RocketOptions& options() const { return options_; }
  RocketOptions& mutable_options() { return options_; }
  const std::vector<rocket::Driver*>& drivers() const { return driver_ptrs_; }
  RocketWeightBufferType& weights() { return weights_; }
  const RocketStats& rocket_stats() const { return stats_; }
  RocketStats& mutable_stats() { return stats_; }
  // The counters above as generic DeviceStats (nodes_run = nodes_npu,
  // predicted_s with the performance model's description), for tools.
  DeviceStats stats() const override;

 private:
  friend class RocketExecutor;
  Support supports_gemm(const Tensor& node, bool check_batch) const;
  RocketOptions options_;
  std::vector<std::unique_ptr<rocket::Driver>> drivers_;
  std::vector<rocket::Driver*> driver_ptrs_;
  RocketWeightBufferType weights_{*this};
  HostBufferType compute_{"rocket-host"};
  RocketExecutor executor_{*this};
  RocketStats stats_;
};

// Opens the drivers the options name (emulator: `cores` emulators, default 1;
// drm_accel: `cores` fds, default 3). Throws opal::Error with the reason when
// the real driver is unavailable.
std::unique_ptr<RocketDevice> make_rocket_device(const RocketOptions& options);

}  // namespace opal
