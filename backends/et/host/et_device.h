// The ET-SoC-1 backend's host glue (the accelerator shape of backends/rocket,
// docs/backends/et.md): a Device whose nodes run as ET kernel launches through
// the driver seam (backends/et/driver: sysemu in process, etrt on a card, fake
// in tests).
//   - supports(): the lowering's check (lower/lower.h: op, dtypes, shapes) and
//     that the device image holds the kernel, each with a reason; a node that
//     reads a weight needs that weight's device copy.
//   - weights: the weight BufferType is host memory with the GGUF bytes (the
//     CPU fallback reads them in place) and uploads each weight once to device
//     memory at load (EtWeightBufferType::device_address).
//   - compute memory is host memory: the executor stages a node's non-weight
//     sources into device memory before its launch and copies its output back
//     after (a KV_STORE's cache in place), so every node can fall back to the
//     CPU and the scheduler's copies stay host memcpys. can_access() says so:
//     the KV cache in host memory is readable here (staged).
//   - the Executor compiles each node once per shape (kernel, staging layout,
//     device staging memory), then per run stages, launches, waits, unstages.
//     A failed launch (trap, kernel failure, budget, coherence hazard) makes
//     that node fall back to the CPU (Segment::fallback), reported once on
//     stderr with the kernel, hart and cause, and counted in stats().
//   - fused dispatch (options.fusion, on by default): a run of consecutive
//     ET nodes is one launch of the dispatcher kernel (kernels/fused.c) over
//     a command list in device memory; every tensor the run touches is
//     mirrored in device memory at its host layout (aliases stay aliases),
//     sources from outside the run are copied in before, outputs out after.
//     A failed fused launch names the sub-op, its node and the hart, marks
//     that node for the CPU and runs the group again op by op.
//   - perf: each launch is a sub-op of its node: RunHooks phases (stage,
//     launch, unstage) and the launch's emulated cycles in the node's
//     counters (perf/et_perf.h).
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/et/driver/driver.h"
#include "backends/et/lower/lower.h"
#include "backends/et/perf/et_perf.h"
#include "graph/backend.h"
#include "graph/host_buffer.h"

namespace opal {

struct EtOptions {
  std::string driver = "sysemu";          // sysemu, fake, etrt
  et::HartSet harts{0x1, 0xFFFFFFFF, 2};  // every launch's harts (sysemu: the emulated chip)
  bool mem_check = true;                  // sysemu: the coherence checker
  bool fit_harts = true;                  // launch only the harts a node's output lines can use (lower.h)
  uint64_t cycle_budget = 200000000;      // emulated cycles per launch before it counts as hung
  std::string image = "all";              // the kernel image (et_kernel_image name)
  int priority = 60;
  bool fallback_to_cpu = true;  // on a fault; false: the error propagates
  // Fused dispatch (kernels/fused.c): each run of consecutive ET nodes of a
  // segment is one launch of the dispatcher over a command list, with device
  // barriers where a sub-op touches bytes an earlier one of the same phase
  // wrote or read. false (`--et-fusion off`): one launch per node.
  bool fusion = true;
  uint64_t barrier_budget = 0;  // cycles a hart may wait at one fused barrier; 0 = cycle_budget
  // A Q8_0 / Q4_0 / F16 MUL_MAT with at least this many activation rows (per
  // type) runs through the tensor unit (int8 / fp16 TensorFMA, its launch
  // with the L1 scratchpad); the defaults are the measured crossover
  // (lower.h TensorRows: F16 from 1 row, Q8_0 / Q4_0 from 2); all(0) = never.
  et::TensorRows tensor_rows;
  // Prediction by shape (docs/backends/et.md "Predicted performance"): the
  // first node of each distinct shape (kernel, op, types, shapes, strides,
  // parameters) runs on the device op by op and its card-model time is kept;
  // every later node of that shape runs on the CPU and is charged the kept
  // time, launches and fused barriers charged as the run would launch them. A
  // whole preset costs one emulated layer. Needs the CPU fallback.
  bool predict_by_shape = false;
  // Test seam: in fused launches the plan's node of this index runs TEST_FAULT
  // (image "test") with fault_mode (0 fails, 1 traps, 3 never arrives) on rank 0.
  int fault_node = -1;
  uint32_t fault_mode = 0;
};

class EtDevice;

// Host memory with the GGUF bytes; device copies beside it, uploaded once.
class EtWeightBufferType : public BufferType {
 public:
  explicit EtWeightBufferType(EtDevice& dev) : dev_(dev) {}
  std::string name() const override { return "et"; }
  bool host_visible() const override { return true; }
  std::unique_ptr<Buffer> allocate(uint64_t size) override;
  void upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) override;
  // The device copy of weight `t` (uploaded here), or 0.
  et::DevAddr device_address(const Tensor& t) const;
  void forget(const Tensor* t) { dev_copy_.erase(t); }
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  EtDevice& dev_;
  std::map<const Tensor*, et::DevAddr> dev_copy_;
  uint64_t device_bytes_ = 0;
};

struct EtStats {
  uint64_t nodes_run = 0, nodes_fallback = 0, plans_compiled = 0, launches = 0;
  uint64_t emulated_cycles = 0;  // sum over launches (sysemu)
  uint64_t bytes_staged_in = 0, bytes_staged_out = 0;
  uint64_t fused_launches = 0, sub_ops = 0, barriers = 0;  // fused dispatch (launches counts these too)
  double predicted_s = 0;  // the card model's seconds for the work run here (perf/et_cost_model.h)
  double roofline_s = 0;   // its bandwidth floor: node bytes / DRAM bandwidth
  uint64_t shapes_emulated = 0, nodes_predicted = 0;  // prediction by shape: emulated once / charged the kept time
  std::string last_error;
};

class EtExecutor : public Executor {
 public:
  explicit EtExecutor(EtDevice& dev) : dev_(dev) {}
  std::unique_ptr<Plan> compile(const Segment& segment) override;
  void run(Plan& plan, RunHooks* hooks) override;

 private:
  EtDevice& dev_;
};

class EtDevice : public Device {
 public:
  // Opens the driver the options name; throws opal::Error saying why the
  // backend is unavailable (driver not built, no kernel images).
  explicit EtDevice(const EtOptions& options);
  // With a given driver (tests inject the fake one) and kernel image bytes.
  EtDevice(const EtOptions& options, std::unique_ptr<et::Driver> driver, std::vector<uint8_t> image);
  ~EtDevice() override;

  std::string name() const override { return "et"; }
  std::string description() const override;
  DeviceRole role() const override { return DeviceRole::Accelerator; }
  int priority() const override { return options_.priority; }
  Support supports(const Tensor& node) const override;
  Support supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const override;
  BufferType& weight_buffer_type() override { return weights_; }
  BufferType& compute_buffer_type() override { return compute_; }
  Executor& executor() override { return executor_; }
  // Host-visible memory is readable: the executor stages it (see above).
  bool can_access(const Buffer& buf) const override;
  DeviceStats stats() const override;

  const EtOptions& options() const { return options_; }
  et::Driver& driver() { return *driver_; }
  et::CodeId code() const { return code_; }
  EtWeightBufferType& weights() { return weights_; }
  const EtStats& et_stats() const { return stats_; }
  EtStats& mutable_stats() { return stats_; }
  // Prediction by shape: the card-model seconds of each shape emulated so far.
  std::map<std::string, double>& shape_predictions() { return shape_predictions_; }
  // Kernel ids the device image holds.
  const std::set<uint32_t>& kernels() const { return kernels_; }

 private:
  Support supports_node(const Tensor& node, bool check_weights) const;
  void init_image(std::vector<uint8_t> image);
  EtOptions options_;
  std::unique_ptr<et::Driver> driver_;
  std::vector<uint8_t> image_;
  et::CodeId code_ = 0;
  std::set<uint32_t> kernels_;
  EtWeightBufferType weights_{*this};
  HostBufferType compute_{"et-host"};
  EtExecutor executor_{*this};
  EtStats stats_;
  std::map<std::string, double> shape_predictions_;
};

// Why `--backend et` cannot be used in this build (empty: it can).
std::string et_unavailable_reason(const std::string& driver = "sysemu");

std::unique_ptr<EtDevice> make_et_device(const EtOptions& options);

}  // namespace opal
