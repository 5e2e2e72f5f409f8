// A first-order performance model of the RK3588 NPU running Opal's GEMMs,
// to predict tokens/s on a board from the same tiling the backend submits
// (shared/docs/rocket-npu.md §5 item 5, §6). Per task:
//   compute = out_pixels * taps * ceil(C/32) * ceil(kernels/32) cycles at the NPU clock
//             (1024 int8 MACs per cycle and core = 32 kernels x 32 channels), / efficiency
//   ddr     = (input + weights unless WEIGHT_REUSE + bias + output bytes) / DDR bandwidth
//   time    = max(compute, ddr) + task overhead   (DMA overlaps the MACs inside a task)
// plus a fixed cost per job (scheduler, IOMMU attach) and per submit; cores
// (one driver each) run in parallel, so a GEMM takes its slowest core's time.
// Host work per GEMM (quantize + pack the activations, unpack + dequantize the
// int32 output) is charged at host_bytes_per_s. Everything else in a model
// (attention, norms, the CPU's share) is outside the model.
// The emulator's task summaries and the analytic tiling give the same counts
// (tested); the parameters are calibrated in docs/backends/rocket.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/rocket/driver/emulator/npu_emulator.h"
#include "backends/rocket/lower/tiling.h"
#include "backends/rocket/scheme/gemm_scheme.h"

namespace opal::rocket {

struct PerfParams {
  double clock_hz = 1.0e9;         // NPU clock: 200 MHz mainline default, 1 GHz vendor BSP
  unsigned cores = 3;              // drivers (fds) the N dimension is split over
  double ddr_bytes_per_s = 20e9;   // sustained DDR bandwidth the NPU gets
  double mac_efficiency = 0.8;     // achieved / peak MAC rate inside a task
  double task_overhead_s = 20e-6;  // per task: regcmd fetch, IRQ, threaded handler
  double job_overhead_s = 40e-6;   // per job: drm_sched, IOMMU attach, runtime PM
  double host_bytes_per_s = 6e9;   // host quantize/pack/unpack rate (fitted, docs/backends/rocket.md)
  // "opal": Opal's tiling (resident weights, WEIGHT_REUSE, large row tiles);
  // "fork": the int8 llama.cpp fork's (16-row tiles, weights reloaded per task).
  std::string schedule = "opal";
  // Operand planes of Opal's schedule (host/npu_gemm.h): every plane product
  // is one more int8 GEMM (w16a16: 3, w8a16 / w16a8: 2, w8a8: 1).
  Precision precision = kDefaultPrecision;
};

struct TaskCost {
  uint64_t mac_cycles = 0;
  uint64_t ddr_bytes = 0;
};
TaskCost task_cost(const TaskSummary& t);

// What one core executes for a GEMM: task summaries grouped by job.
struct CoreWork {
  std::vector<std::vector<TaskSummary>> jobs;
};

struct Prediction {
  double seconds = 0;  // wall time (slowest core + host)
  double npu_seconds = 0, host_seconds = 0;
  uint64_t tasks = 0, jobs = 0, mac_cycles = 0, ddr_bytes = 0;
  void add(const Prediction& o);
};

// Time of the given per-core work (plus host bytes) under the parameters.
Prediction predict_work(const std::vector<CoreWork>& cores, uint64_t host_bytes, const PerfParams& p);

// The summary the emulator would record for a task of this plan.
TaskSummary summarize_task(const ConvOp& op, const TaskTile& t);

// Y[M,N] = X[M,K] W[N,K]^T as Opal's backend submits it (K padded and
// segmented by `group` or 8192, one GEMM per plane product of p.precision, N
// split over p.cores and sliced at 8192, M padded to 4), or as the int8 fork
// would (p.schedule == "fork"; int8 only).
Prediction predict_gemm(unsigned m, unsigned k, unsigned n, const PerfParams& p, unsigned group = 0);

// The matmuls of one decoder layer and the model's layer count, for a prompt
// of `tokens` tokens: prefill time and tokens/s of the NPU part.
struct MatmulShape {
  std::string name;
  unsigned k = 0, n = 0;
  unsigned count = 1;  // per model (e.g. n_layer)
};
struct ModelPrediction {
  Prediction total;
  double tokens_per_s = 0;
  std::vector<std::pair<MatmulShape, Prediction>> per_shape;
};
ModelPrediction predict_prefill(const std::vector<MatmulShape>& shapes, unsigned tokens, const PerfParams& p,
                                unsigned group = 0);

// Published dense decoder shapes (for calibration against published figures).
struct ModelPreset {
  std::string name;
  unsigned n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
};
const std::vector<ModelPreset>& model_presets();
std::vector<MatmulShape> preset_shapes(const ModelPreset& m);

}  // namespace opal::rocket
