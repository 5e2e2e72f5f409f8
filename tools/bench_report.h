// `opal bench` results and their outputs: llama-bench's markdown table and
// its machine-readable schema (csv, json, jsonl), plus Opal's additions
// (achieved GB/s, % of the measured memory bandwidth, load mode, a
// conditions block) and an SVG bar chart. Also the machine probes the
// conditions block needs (CPU model, governor, THP, load average) and the
// memory-bandwidth measurement.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace opal::tools {

// What the machine looked like during the run.
struct BenchConditions {
  std::string cpu;                       // /proc/cpuinfo model name
  std::string isa;                       // ISA the kernels use (e.g. "avx512 (vnni, bf16)" or "ref")
  std::string kernels;                   // matmul kernel per weight type of the models, e.g. "q4_0=avx512 f32=ref"
  std::string governor;                  // cpufreq governor, or "n/a"
  std::string thp;                       // transparent huge pages setting
  std::string kernel;                    // uname -r
  std::string commit;                    // Opal's git commit
  std::string load_before, load_after;   // /proc/loadavg (1, 5, 15 min)
  std::map<int, double> bandwidth_gbps;  // measured read bandwidth per thread count
};

struct BenchResult {
  // Model.
  std::string model_filename, model_type;  // model_type as llama-bench: "llama 1B Q4_K - Medium"
  uint64_t model_size = 0, model_n_params = 0;
  uint64_t weight_bytes_per_token = 0;  // bytes of weights a decode step reads
  // Parameters.
  std::string backend = "CPU";
  int n_threads = 1;
  int64_t n_batch = 2048, n_ubatch = 512;
  std::string type_k = "f16", type_v = "f16";
  int flash_attn = 0;   // llama-bench's fa: 1 = tiled attention (runtime/context.h FlashAttn)
  int64_t n_depth = 0;  // tokens in the KV cache before each timed run (llama-bench's -d)
  std::string load_mode;
  double load_seconds = 0;  // Model::load wall time in this load mode
  int64_t n_prompt = 0, n_gen = 0;
  std::string test_time;  // ISO 8601, UTC
  // Samples (one per repetition), in nanoseconds.
  std::vector<uint64_t> samples_ns;
  // Per device whose stats predict the time of its work on the hardware it
  // stands for (DeviceStats::prediction, graph/backend.h; e.g. --backend
  // rocket: the performance model's RK3588 seconds for the matmuls the NPU
  // ran), per repetition.
  struct DevicePrediction {
    std::string device;                                 // "rocket"
    std::string model, scope, nodes_label, only_label;  // DeviceStats::Prediction
    double predicted_s = 0;
    double roofline_s = 0;  // the device's bandwidth floor for the same work (0: it reports none)
    int64_t nodes_run = 0;
  };
  std::vector<DevicePrediction> predictions;

  std::string test_name() const;  // pp512, tg128, pp512+tg128; "pp512 @ d4096" at a depth
  double avg_ns() const;
  double stddev_ns() const;
  std::vector<double> samples_ts() const;
  double avg_ts() const;
  double stddev_ts() const;
  // Weight bytes streamed per second (GB/s): a decode step reads the weights
  // once, a prompt reads them once per ubatch.
  double achieved_gbps() const;
};

// Per predicting device (e.g. --backend rocket) and test: the time its model
// predicts for the nodes the device ran and the tokens/s that work alone
// would allow (empty when no device predicted anything).
std::string format_device_predictions(const std::vector<BenchResult>& results);

BenchConditions probe_conditions();
std::string read_loadavg();
// Multi-threaded read bandwidth in GB/s (several streams over a 256 MiB buffer, best of 3).
double measure_read_bandwidth(int n_threads);

// Writers. `default_*` tell which parameter columns the markdown table can omit.
struct BenchDefaults {
  int64_t n_batch = 2048, n_ubatch = 512;
  std::string type_k = "f16", type_v = "f16";
  int flash_attn = 0;
};
std::string format_markdown(const std::vector<BenchResult>& results, const BenchConditions& c, const BenchDefaults& d);
std::string format_csv(const std::vector<BenchResult>& results, const BenchConditions& c);
std::string format_json(const std::vector<BenchResult>& results, const BenchConditions& c);
std::string format_jsonl(const std::vector<BenchResult>& results, const BenchConditions& c);
std::string format_svg(const std::vector<BenchResult>& results, const BenchConditions& c);

// Human-readable sizes as llama-bench prints them.
std::string format_size(uint64_t bytes);     // "93.43 MiB", "1.87 GiB"
std::string format_params(uint64_t params);  // "134.52 M", "1.24 B"

}  // namespace opal::tools
