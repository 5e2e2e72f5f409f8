// The backend interface, split by lifetime (docs/architecture.md, "Backends"):
//   Device      what a backend is and what it can run: name, memory, priority,
//               role, supports(node) -> Support{ok, reason}.
//   BufferType  how a backend owns bytes: allocates Buffers; uploads weights
//               (and may transform them on the way: repack, re-layout, dequantize).
//   Buffer      one allocation; host-visible or not; read/write for transfers.
//   Executor    compiles a Segment (the nodes placed on it, in order) into a
//               Plan once per shape bucket, then runs the plan many times.
//
// The scheduler (graph/scheduler.h) places nodes, cuts segments, plans
// compute memory and inserts copies between buffers a device cannot access.
// Executors call the RunHooks around every node they execute (or fused group),
// which is where perf events and shadow comparison plug in.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace opal {

// The answer to "can this device run this node?"; the reason is shown to users.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

class BufferType;

class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual BufferType& type() const = 0;
  virtual uint64_t size() const = 0;
  // Start of the bytes in the owning backend's address space. Only host-visible
  // buffers may be dereferenced by the CPU.
  virtual void* base() = 0;
  // Transfers between host memory and this buffer.
  virtual void write(uint64_t offset, const void* src, uint64_t n) = 0;
  virtual void read(uint64_t offset, void* dst, uint64_t n) const = 0;
};

class BufferType {
 public:
  virtual ~BufferType() = default;
  virtual std::string name() const = 0;
  // True if the CPU can read and write the bytes directly (plain host memory).
  virtual bool host_visible() const = 0;
  virtual uint64_t alignment() const { return 64; }
  virtual std::unique_ptr<Buffer> allocate(uint64_t size) = 0;
  // A buffer that wraps existing host bytes without copying (mmap'd weights).
  // Returns null where the backend cannot use host memory in place.
  virtual std::unique_ptr<Buffer> wrap_host(const void* data, uint64_t size) { return nullptr; }
  // Bytes weight `t` takes once uploaded (a transform may change its size).
  virtual uint64_t weight_size(const Tensor& t) const;
  // Uploads a weight from its GGUF bytes in host memory into `buf` at `offset`.
  // May transform it; then it updates t.type / t.nb to what it stored.
  // Sets t.buffer and t.data.
  virtual void upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset);
  // Load-time repacking (models/model.cpp; the CPU's row groups,
  // docs/cpu-decode.md "Decode at the wall"): the layout (Tensor::layout) in
  // which this buffer type's kernels stream weight `t` best, given every node
  // that reads it (`consumers`, all placed where the layout is understood), or
  // 0 to keep the GGUF's bytes. Default: never repack.
  virtual uint8_t repack_layout(const Tensor& t, const std::vector<const Tensor*>& consumers) const { return 0; }
  // Rewrites t's bytes, in writable host memory, in place into `layout` (a
  // value repack_layout returned) and sets t.layout. Default: throws.
  virtual void repack_weight(Tensor& t, uint8_t layout) const;
};

class Device;
class RunHooks;
struct CrossCopy;

// How an accelerator's executor hands a node back after a fault: the scheduler
// runs it on the host device (the CPU), whose kernels write the node's output
// where the memory plan put it. The accelerator never calls another backend's
// kernels itself. The host plan for a node is compiled on its first fault (the
// one place running may allocate: a fault is not the steady state).
class HostFallback {
 public:
  virtual ~HostFallback() = default;
  // Runs `node`, one of the segment's nodes, on the host. No hooks are called:
  // the executor reports the node itself (with a kernel name saying it fell back).
  virtual void run(Tensor& node) = 0;
};

// The nodes placed on one device, consecutive in the graph's order.
struct Segment {
  Device* device = nullptr;
  std::vector<Tensor*> nodes;
  // Set by the scheduler for an accelerator's segment whose buffers the host
  // can read; null otherwise (then a fault is an error).
  HostFallback* fallback = nullptr;
};

// A compiled segment; opaque to everyone but its executor.
class Plan {
 public:
  virtual ~Plan() = default;
};

// Called around each executed node. `kernel` names the implementation used
// (e.g. "ref", "avx2"); backends may report a fused group as one call.
class RunHooks {
 public:
  virtual ~RunHooks() = default;
  virtual void before_node(const Device& dev, const Tensor& node) {}
  virtual void after_node(const Device& dev, const Tensor& node, const char* kernel) {}
  // Called between before_node and after_node of `node` for each phase of
  // its execution an executor times (an accelerator's host pack, submit,
  // device wait, unpack), in order. `phase` is a string literal; start_ns and
  // end_ns are std::chrono::steady_clock nanoseconds since its epoch
  // (phase_clock_ns()). Executors time phases only when they have hooks.
  virtual void node_phase(const Device& dev, const Tensor& node, const char* phase, int64_t start_ns, int64_t end_ns) {}
  // Called between before_node and after_node of `node` for each named
  // number an executor knows about its work (an emulated device's cycles, the
  // harts it ran on, bytes staged), in order; `name` is a string literal.
  // Executors report counters only when they have hooks.
  virtual void node_counter(const Device& dev, const Tensor& node, const char* name, double value) {}
  // Called by the scheduler around each copy between devices (CrossCopy in
  // scheduler.h), made at the start of the consuming device's segment.
  // Whether after_node reads the node's sources and output from memory (the
  // shadow compare): an executor that reports nodes after a launch of several
  // (a fused launch) must then keep those bytes as they were when the node ran.
  virtual bool reads_node_memory() const { return false; }
  virtual void before_copy(const CrossCopy& copy, const Device& to) {}
  virtual void after_copy(const CrossCopy& copy, const Device& to) {}
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Called once per shape bucket. All memory the plan needs (scratch) is
  // allocated here, never in run().
  virtual std::unique_ptr<Plan> compile(const Segment& segment) = 0;
  virtual void run(Plan& plan, RunHooks* hooks) = 0;
};

enum class DeviceRole {
  Host,         // the CPU: runs every op; the fallback by role
  Accelerator,  // runs a subset; gets the nodes it supports by priority
};

struct DeviceMemory {
  uint64_t total = 0;  // 0 = unknown
  uint64_t free = 0;
};

// The clock of RunHooks::node_phase: steady_clock nanoseconds since its epoch.
int64_t phase_clock_ns();

// A device's running counters (Device::stats()), named so that tools can
// difference them around a run and print them without knowing the backend.
// Common names: nodes_run (nodes the device ran itself), nodes_fallback
// (nodes it handed to the host after a fault), plans_compiled, submits, and
// predicted_s: the seconds a performance model predicts the work of
// nodes_run takes on the hardware the device stands for (an emulated
// accelerator), described by `prediction`.
struct DeviceStats {
  struct Value {
    std::string name;
    double value = 0;
  };
  // What predicted_s models; empty labels: the device predicts nothing.
  struct Prediction {
    std::string model;  // e.g. "RK3588 NPU, performance model: 3 cores at 1 GHz, docs/backends/rocket.md"
    std::string scope;  // what it covers: "matmuls the NPU ran; everything else ... is not modelled"
    std::string nodes;  // what nodes_run counts, as a column heading: "NPU matmuls"
    std::string only;   // the rate of that work alone, as a column heading: "matmul-only"
  };
  std::vector<Value> values;
  Prediction prediction;
  // The value named `name`, or 0 when the device has no such counter.
  double get(std::string_view name) const;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const { return name(); }
  virtual DeviceRole role() const = 0;
  // Higher runs first among devices that support a node.
  virtual int priority() const = 0;
  virtual DeviceMemory memory() const { return {}; }
  virtual Support supports(const Tensor& node) const = 0;
  // Whether a weight of this shape/type may live here given the ops that read
  // it. Default: every consumer must be supported.
  virtual Support supports_weight(const Tensor& weight, const std::vector<const Tensor*>& consumers) const;
  virtual BufferType& weight_buffer_type() = 0;
  virtual BufferType& compute_buffer_type() = 0;
  virtual Executor& executor() = 0;
  // True if this device's kernels can read a tensor held in `buf`.
  virtual bool can_access(const Buffer& buf) const;
  virtual void set_threads(int n) {}
  // Running counters since the device was made (DeviceStats); none by default.
  virtual DeviceStats stats() const { return {}; }
};

}  // namespace opal
