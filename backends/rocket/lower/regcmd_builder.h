// The register-command builder: one regcmd stream per task, in Mesa's order
// and with Mesa's values (see docs/backends/rocket.md for the list of constants and
// quirks reproduced), then all streams in one 64-byte-aligned regcmd buffer
// with the tails chained the way Mesa patches them.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backends/rocket/abi/job.h"
#include "backends/rocket/lower/tiling.h"

namespace opal::rocket {

// The NPU addresses (IOVAs) of the buffers one convolution uses.
struct BufferAddresses {
  uint32_t input = 0;
  uint32_t output = 0;
  uint32_t weights = 0;
  uint32_t biases = 0;
};

// Output conversion programmed into DPU_OUT_CVT_{OFFSET,SCALE,SHIFT}.
struct OutCvt {
  uint32_t offset = 0;  // output zero point - 0x80, as a 32-bit two's complement value
  uint32_t scale = 0;   // 16-bit multiplier
  uint32_t shift = 0;   // right shift; effective multiplier = scale * 2^-shift
};

// Mesa's truncate_bits: 1 for a whitelist of 15 weight-scale bit patterns, else 0.
unsigned mesa_truncate_bits(float weight_scale);
// Mesa's OUT_CVT derivation from the f32 bits of in_scale * w_scale / out_scale.
OutCvt mesa_out_cvt(const QuantParams& q, unsigned truncate_bits);

struct TaskStreamParams {
  const ConvOp* op = nullptr;
  const TilePlan* plan = nullptr;
  BufferAddresses addresses;
  OutCvt out_cvt;
  unsigned truncate_bits = 0;
};

// The entries of task `index`, tail included (the tail's next-task fields are 0;
// assemble_regcmd patches them).
std::vector<uint64_t> build_task_stream(const TaskStreamParams& p, size_t index);

struct RegcmdBuffer {
  std::vector<uint8_t> bytes;     // the whole regcmd BO content
  std::vector<uint32_t> offsets;  // byte offset of each task's stream
  std::vector<uint32_t> counts;   // entries of each task
  std::vector<uint64_t> entries;  // every task's entries concatenated (golden regcmd.bin form)
};

// Size of the regcmd buffer for these streams (each task 64-byte aligned).
uint32_t regcmd_buffer_size(const std::vector<std::vector<uint64_t>>& streams);
// Lays out the streams at 64-byte-aligned offsets of a buffer living at
// `regcmd_iova`, chaining each task's tail to the next task as Mesa does.
RegcmdBuffer assemble_regcmd(std::vector<std::vector<uint64_t>> streams, uint32_t regcmd_iova);

// The jobs of a plan, with the given regcmd placement and BO handles.
std::vector<abi::JobDesc> make_jobs(const TilePlan& plan, const RegcmdBuffer& regcmd, uint32_t regcmd_iova,
                                    uint32_t input_handle, uint32_t output_handle);

}  // namespace opal::rocket
