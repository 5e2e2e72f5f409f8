// A test accelerator: a backend that runs only MUL_MAT with Q8_0 or F16
// weights, in its own memory that the CPU may not touch. It exists so that
// placement, segment cutting, cross-device copies and CPU fallback are
// exercised end to end in tests, and as the template for real NPU backends:
//   - its BufferType is not host-visible; uploads transform weights (here:
//     dequantize to f32 rows, as an NPU would re-tile / re-quantize);
//   - supports() answers per node with a reason;
//   - its Executor compiles a segment once and runs it many times.
// Numerics follow the CPU reference exactly (same activation rounding and
// summation order), so a model run through it gives the CPU's logits.
#pragma once
#include <map>
#include <memory>

#include "graph/backend.h"

namespace opal {

class TestAccelDevice;

class TestAccelBufferType : public BufferType {
 public:
  std::string name() const override { return "test_accel"; }
  bool host_visible() const override { return false; }
  std::unique_ptr<Buffer> allocate(uint64_t size) override;
  uint64_t weight_size(const Tensor& t) const override;
  void upload_weight(Tensor& t, const void* host_bytes, Buffer& buf, uint64_t offset) override;
  // The GGUF type of a weight uploaded here (it is stored as f32).
  DType original_type(const Tensor& t) const;
  uint64_t bytes_uploaded() const { return bytes_uploaded_; }

 private:
  std::map<const Tensor*, DType> original_;
  uint64_t bytes_uploaded_ = 0;
};

class TestAccelExecutor : public Executor {
 public:
  explicit TestAccelExecutor(TestAccelDevice& dev) : dev_(dev) {}
  std::unique_ptr<Plan> compile(const Segment& segment) override;
  void run(Plan& plan, RunHooks* hooks) override;
  uint64_t nodes_run() const { return nodes_run_; }
  uint64_t plans_compiled() const { return plans_compiled_; }

 private:
  TestAccelDevice& dev_;
  uint64_t nodes_run_ = 0;
  uint64_t plans_compiled_ = 0;
};

class TestAccelDevice : public Device {
 public:
  explicit TestAccelDevice(int priority = 100) : priority_(priority), executor_(*this) {}
  std::string name() const override { return "test_accel"; }
  DeviceRole role() const override { return DeviceRole::Accelerator; }
  int priority() const override { return priority_; }
  Support supports(const Tensor& node) const override;
  BufferType& weight_buffer_type() override { return buffer_type_; }
  BufferType& compute_buffer_type() override { return buffer_type_; }
  Executor& executor() override { return executor_; }
  TestAccelBufferType& buffers() { return buffer_type_; }
  const TestAccelExecutor& accel_executor() const { return executor_; }

 private:
  int priority_;
  TestAccelBufferType buffer_type_;
  TestAccelExecutor executor_;
};

}  // namespace opal
