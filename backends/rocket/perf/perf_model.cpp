// The NPU performance model (see perf_model.h).
#include "backends/rocket/perf/perf_model.h"

#include <algorithm>

#include "backends/rocket/abi/job.h"
#include "backends/rocket/scheme/gemm_scheme.h"
#include "core/error.h"

namespace opal::rocket {

TaskCost task_cost(const TaskSummary& t) {
  TaskCost c;
  const uint64_t pixels = uint64_t(t.out_width) * t.out_height;
  const uint64_t taps = uint64_t(t.kernel_width) * t.kernel_height;
  c.mac_cycles = pixels * taps * div_up(t.channels, 32) * div_up(t.kernels, 32);
  const uint64_t input = uint64_t(t.in_width) * t.in_height * t.channels;
  const uint64_t weights = t.weight_reuse ? 0 : t.weight_bytes;
  const uint64_t output = pixels * t.out_channels * (t.int32_output ? 4 : 1);
  c.ddr_bytes = input + weights + output + uint64_t(t.out_channels) * 4;
  return c;
}

void Prediction::add(const Prediction& o) {
  seconds += o.seconds;
  npu_seconds += o.npu_seconds;
  host_seconds += o.host_seconds;
  tasks += o.tasks;
  jobs += o.jobs;
  mac_cycles += o.mac_cycles;
  ddr_bytes += o.ddr_bytes;
}

Prediction predict_work(const std::vector<CoreWork>& cores, uint64_t host_bytes, const PerfParams& p) {
  if (p.clock_hz <= 0 || p.ddr_bytes_per_s <= 0 || p.mac_efficiency <= 0 || p.host_bytes_per_s <= 0)
    fail("rocket perf model: clock, bandwidths and efficiency must be positive");
  Prediction r;
  double slowest = 0;
  for (const CoreWork& core : cores) {
    double t = 0;
    for (const auto& job : core.jobs) {
      t += p.job_overhead_s;
      ++r.jobs;
      for (const TaskSummary& s : job) {
        const TaskCost c = task_cost(s);
        const double compute = double(c.mac_cycles) / (p.clock_hz * p.mac_efficiency);
        const double ddr = double(c.ddr_bytes) / p.ddr_bytes_per_s;
        t += std::max(compute, ddr) + p.task_overhead_s;
        ++r.tasks;
        r.mac_cycles += c.mac_cycles;
        r.ddr_bytes += c.ddr_bytes;
      }
    }
    slowest = std::max(slowest, t);
  }
  // The cores share one DDR: the total traffic bounds the parallel time too.
  r.npu_seconds = std::max(slowest, double(r.ddr_bytes) / p.ddr_bytes_per_s);
  r.host_seconds = double(host_bytes) / p.host_bytes_per_s;
  r.seconds = r.npu_seconds + r.host_seconds;
  return r;
}

TaskSummary summarize_task(const ConvOp& op, const TaskTile& t) {
  TaskSummary s;
  s.in_width = op.in_width;
  s.in_height = t.in_height;
  s.channels = align_up(std::max(op.in_channels, 16u), 16);
  s.kernels = align_up(t.kernels, 2);
  s.out_channels = align_up(std::max(t.kernels, 32u), 32);
  s.out_width = t.out_width;
  s.out_height = t.out_height;
  s.kernel_width = op.kernel_width;
  s.kernel_height = op.kernel_height;
  s.stride = op.stride;
  s.data_banks = t.data_banks;
  s.weight_banks = t.weight_banks;
  s.weight_reuse = t.weight_reuse;
  s.weight_bytes = op.taps() * s.channels * s.kernels;
  s.int32_output = op.int32_output;
  return s;
}

namespace {

// The int8 fork's schedule: 16-row x 128-kernel tiles over the full K, weights
// reloaded by every task, int8 output, up to 32 tasks per job; weights
// requantized on the host per call.
Prediction predict_fork(unsigned m, unsigned k, unsigned n, const PerfParams& p) {
  constexpr unsigned kTileM = 16, kTileN = 128;
  std::vector<CoreWork> cores(std::max(1u, p.cores));
  const auto ranges = split_n(n, unsigned(cores.size()));
  for (size_t c = 0; c < ranges.size(); ++c) {
    std::vector<TaskSummary> job;
    for (unsigned n0 = 0; n0 < ranges[c].second; n0 += kTileN)
      for (unsigned m0 = 0; m0 < m; m0 += kTileM) {
        TaskSummary s;
        s.in_width = s.out_width = 1;
        s.in_height = s.out_height = kTileM;
        s.channels = align_up(k, 16);
        s.kernels = std::min(kTileN, ranges[c].second - n0);
        s.out_channels = align_up(s.kernels, 32);
        s.kernel_width = s.kernel_height = 1;
        s.weight_bytes = s.channels * s.kernels;
        if (job.size() == kMaxTasksPerJob) {
          cores[c].jobs.push_back(job);
          job.clear();
        }
        job.push_back(s);
      }
    if (!job.empty()) cores[c].jobs.push_back(job);
  }
  const uint64_t host = uint64_t(m) * k * 5 + uint64_t(m) * n * 5 + uint64_t(k) * n * 2;
  return predict_work(cores, host, p);
}

}  // namespace

Prediction predict_gemm(unsigned m, unsigned k, unsigned n, const PerfParams& p, unsigned group) {
  if (m == 0 || k == 0 || n == 0) fail("rocket perf model: empty GEMM {}x{}x{}", m, k, n);
  if (p.schedule == "fork") return predict_fork(m, k, n, p);
  if (p.schedule != "opal") fail("rocket perf model: unknown schedule '{}' (opal, fork)", p.schedule);
  Prediction total;
  // Row chunks of at most kMaxGemmRows (the backend declines larger M; a bench
  // would submit the batch in such chunks).
  for (unsigned m0 = 0; m0 < m; m0 += kMaxGemmRows) {
    const unsigned rows = std::min(kMaxGemmRows, m - m0);
    const unsigned mp = align_up(rows, 4), kp = align_up(k, 32);
    const QuantScheme scheme = make_scheme(k, false, group, p.precision);
    const std::vector<KSegment> segs = split_k(kp, scheme.group ? scheme.group : 8192);
    const std::vector<PlaneTerm> terms = plane_terms(scheme.input_planes, scheme.weight_planes);
    std::vector<CoreWork> cores(std::max(1u, p.cores));
    const auto ranges = split_n(n, unsigned(cores.size()));
    uint64_t host = uint64_t(rows) * k * 4 + uint64_t(mp) * kp * scheme.input_planes + uint64_t(rows) * n * 4;
    for (size_t c = 0; c < ranges.size(); ++c)
      for (unsigned n0 = 0; n0 < ranges[c].second; n0 += kMaxSliceN) {
        const unsigned sn = std::min(kMaxSliceN, ranges[c].second - n0);
        for (const KSegment& seg : segs) {
          ConvOp op = ConvOp::gemm(mp, seg.k, sn, QuantParams{});
          op.int32_output = true;
          const TilePlan plan = plan_tiles(op, Policy::Opal);
          for (size_t t = 0; t < terms.size(); ++t) {  // the same tiling per plane product
            for (const auto& ids : plan.jobs) {
              std::vector<TaskSummary> job;
              for (unsigned i : ids) job.push_back(summarize_task(op, plan.tasks[i]));
              cores[c].jobs.push_back(std::move(job));
            }
            host += uint64_t(mp) * align_up(sn, 32) * 4;
          }
        }
      }
    total.add(predict_work(cores, host, p));
  }
  return total;
}

ModelPrediction predict_prefill(const std::vector<MatmulShape>& shapes, unsigned tokens, const PerfParams& p,
                                unsigned group) {
  ModelPrediction r;
  for (const MatmulShape& s : shapes) {
    Prediction one = predict_gemm(tokens, s.k, s.n, p, group);
    Prediction all;
    for (unsigned i = 0; i < s.count; ++i) all.add(one);
    r.total.add(all);
    r.per_shape.push_back({s, all});
  }
  r.tokens_per_s = r.total.seconds > 0 ? tokens / r.total.seconds : 0;
  return r;
}

const std::vector<ModelPreset>& model_presets() {
  // Published configs (config.json of each model): n_embd, n_layer, heads, KV heads, head dim, n_ff.
  static const std::vector<ModelPreset> presets = {
      {"qwen2-0.5b", 896, 24, 14, 2, 64, 4864},
      {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072},
      {"tinyllama-1.1b", 2048, 22, 32, 4, 64, 5632},
      {"qwen2.5-1.5b", 1536, 28, 12, 2, 128, 8960},
      // Proxy for gemma-4-E2B (its config is not in shared/docs): Gemma 3n E2B's
      // text decoder without per-layer embeddings, 30 layers, 2048 wide, n_ff 8192.
      {"gemma-e2b-proxy", 2048, 30, 8, 2, 256, 8192},
  };
  return presets;
}

std::vector<MatmulShape> preset_shapes(const ModelPreset& m) {
  const unsigned q = m.n_head * m.head_dim, kv = m.n_head_kv * m.head_dim;
  return {{"attn_q", m.n_embd, q, m.n_layer},        {"attn_k", m.n_embd, kv, m.n_layer},
          {"attn_v", m.n_embd, kv, m.n_layer},       {"attn_output", q, m.n_embd, m.n_layer},
          {"ffn_gate", m.n_embd, m.n_ff, m.n_layer}, {"ffn_up", m.n_embd, m.n_ff, m.n_layer},
          {"ffn_down", m.n_ff, m.n_embd, m.n_layer}};
}

}  // namespace opal::rocket
