// A driver that injects the faults the rocket backend must survive, around an
// emulator: SUBMIT failing with an errno, a job the kernel drops silently
// (SUBMIT returns 0 but nothing runs: the uAPI ignores per-job errors), and a
// PREP_BO wait that times out.
#pragma once
#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "core/error.h"

namespace opal::rocket {

enum class FaultKind { SubmitFails, JobDropped, PrepTimesOut };

class FaultDriver : public Driver {
 public:
  explicit FaultDriver(FaultKind kind) : kind_(kind) {}
  bool armed = false;  // faults only while armed (weights and plans are built unarmed)
  unsigned faults = 0;

  std::string name() const override { return "fault-injecting emulator"; }
  BoInfo create_bo(uint64_t size) override { return inner_.create_bo(size); }
  uint8_t* cpu_pointer(uint32_t handle) override { return inner_.cpu_pointer(handle); }
  void prep_bo(uint32_t handle, int64_t deadline_ns) override {
    if (armed && kind_ == FaultKind::PrepTimesOut) {
      ++faults;
      fail("rocket: PREP_BO on fault-injecting emulator failed: Timer expired (job timeout)");
    }
    inner_.prep_bo(handle, deadline_ns);
  }
  void fini_bo(uint32_t handle) override { inner_.fini_bo(handle); }
  void submit(std::span<const abi::JobDesc> jobs) override {
    if (armed && kind_ == FaultKind::SubmitFails) {
      ++faults;
      fail("rocket: SUBMIT on fault-injecting emulator failed: Invalid argument");
    }
    if (armed && kind_ == FaultKind::JobDropped) {
      ++faults;
      return;
    }
    inner_.submit(jobs);
  }
  void destroy_bo(uint32_t handle) override { inner_.destroy_bo(handle); }

 private:
  FaultKind kind_;
  EmulatorDriver inner_;
};

}  // namespace opal::rocket
