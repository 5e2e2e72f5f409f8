// Software model of one RK3588 NPU core executing regcmd tasks: decodes the
// registers a task writes, checks them, and computes the INT8 convolution with
// int32 accumulation and the DPU output conversion, reading and writing NPU
// memory through the IOVAs in the registers.
//
// Numerics per output element (int8 in, int32 accumulate):
//   acc  = sum over taps and DATAIN_CHANNEL channels of x * w (padding reads PAD_CON1's low byte)
//   acc' = CLIP_TRUNCATE t: round-half-away(acc / 2^t), saturated to int32
//   acc''= acc' + bias[n] (BS ALU add from BRDMA, saturating)
//   int8 out:  y = sat8(round(acc'' * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT) + OUT_CVT_OFFSET)
//   int32 out: y = acc''
// The rounding of the OUT_CVT shift is undocumented for this IP: it is the
// explicit parameter EmulatorOptions::out_cvt_rounding (NVDLA rounds half away
// from zero; calibrate on hardware, docs/backends/rocket.md).
//
// Memory model [inferred, consistent with every golden case]: input element
// (row, col, ch) is at FEATURE_DATA_ADDR + (ch/16) * surface_pitch +
// row * line_pitch + col * 16 + ch%16 with line_pitch = 4 * LINE_STRIDE and
// surface_pitch = 16 * (SURF_STRIDE + LINE_STRIDE) (28-bit wrap); output
// element (row, col, n) at DST_BASE_ADDR + (n/16) * 16 * DST_SURF_STRIDE +
// (row * width + col) * 16 + n%16 (int32: 4 channels per 16-byte atom).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/rocket/abi/job.h"

namespace opal::rocket {

// NPU address space as seen by one core (an IOMMU domain).
class NpuMemory {
 public:
  virtual ~NpuMemory() = default;
  // Host pointer to [iova, iova + size) if that range lies inside one buffer, else nullptr.
  virtual uint8_t* resolve(uint32_t iova, uint64_t size) = 0;
};

enum class Rounding { HalfAwayFromZero, HalfUp, HalfEven, Truncate };
const char* rounding_name(Rounding r);
Rounding parse_rounding(const std::string& s);

struct EmulatorOptions {
  // Rounding of the DPU OUT_CVT right shift (undocumented; NVDLA: half away from zero).
  Rounding out_cvt_rounding = Rounding::HalfAwayFromZero;
  // Fail a task whose weights exceed its CBUF weight banks (Mesa programs such
  // tasks, e.g. 16 MiB of weights against 10 banks; Opal's builder never does).
  bool require_resident_weights = false;
  // Fail on a wrapped (negative) CNA_DMA_CON2 surface stride instead of warning
  // (Mesa emits one for M < 4).
  bool reject_wrapped_surface_stride = false;
};

struct TaskSummary {
  unsigned job = 0, task = 0;
  unsigned in_width = 0, in_height = 0, channels = 0, kernels = 0, out_channels = 0;
  unsigned out_width = 0, out_height = 0, kernel_width = 0, kernel_height = 0, stride = 0;
  unsigned data_banks = 0, weight_banks = 0;
  bool weight_reuse = false;
  uint32_t weight_bytes = 0;
  bool int32_output = false;
};

class NpuEmulator {
 public:
  NpuEmulator(NpuMemory& memory, EmulatorOptions options) : memory_(memory), options_(options) {}
  // Runs the tasks of one job in order. Throws opal::Error naming the job,
  // task and register on any rejected programming.
  void run_job(const abi::JobDesc& job);

  // Summaries of the tasks run, oldest first; bounded (the oldest half is
  // dropped past kMaxTaskSummaries) so a long run does not grow without limit.
  const std::vector<TaskSummary>& tasks() const { return tasks_; }
  static constexpr size_t kMaxTaskSummaries = size_t(1) << 16;
  const std::vector<std::string>& warnings() const { return warnings_; }
  const EmulatorOptions& options() const { return options_; }

 private:
  NpuMemory& memory_;
  EmulatorOptions options_;
  unsigned jobs_run_ = 0;
  std::vector<TaskSummary> tasks_;
  std::vector<std::string> warnings_;
};

// The OUT_CVT step alone: sat8(round(value * scale / 2^shift) + offset).
int8_t out_cvt_int8(int64_t value, uint32_t scale, uint32_t shift, int32_t offset, Rounding r);
// Right shift with rounding of a signed value.
int64_t round_shift(int64_t v, unsigned shift, Rounding r);

}  // namespace opal::rocket
