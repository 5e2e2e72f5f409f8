// Server metrics in the Prometheus text exposition format (GET /metrics).
//
// Counters and gauges carry llama-server's `llamacpp:*` names so existing
// dashboards work; Opal adds four latency histograms (vLLM-style):
//   opal:time_to_first_token_seconds  request arrival -> first generated token
//   opal:inter_token_latency_seconds  gap between consecutive generated tokens
//   opal:request_latency_seconds      request arrival -> final token
//   opal:queue_wait_seconds           request arrival -> assigned to a slot
// Each histogram has cumulative `_bucket{le="..."}` lines, `_sum` and `_count`.
// All methods are thread-safe (one mutex; updates are a few additions).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace opal::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the `# TYPE` line and the bucket/_sum/_count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  // A prompt of n tokens was evaluated in `seconds` (one slot's share of a decode).
  void add_prompt(int64_t n_tokens, double seconds);
  // A slot generated n tokens in `seconds`.
  void add_predicted(int64_t n_tokens, double seconds);
  // One batched decode ran with n_busy slots.
  void add_decode(int n_busy);
  void set_processing(int n_processing, int n_deferred);
  void observe_ttft(double s);
  void observe_inter_token(double s);
  void observe_request(double s);
  void observe_queue_wait(double s);
  void add_request_finished();
  void add_request_cancelled();  // the client went away before the end
  // Speculative decoding: n draft tokens verified, `accepted` of them taken.
  void add_draft(int64_t n, int64_t accepted);
  // One engine step's drafting with a draft model took n draft-model decodes (for all its slots together).
  void add_draft_decodes(int64_t n);

  std::string render() const;

  struct Snapshot {
    uint64_t prompt_tokens = 0, predicted_tokens = 0, n_decode = 0, requests = 0, cancelled = 0, ttft_count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  uint64_t prompt_tokens_ = 0, predicted_tokens_ = 0, n_decode_ = 0, busy_slots_sum_ = 0, requests_ = 0, cancelled_ = 0;
  uint64_t draft_tokens_ = 0, draft_accepted_ = 0, draft_decodes_ = 0, draft_rounds_ = 0;
  double prompt_seconds_ = 0, predicted_seconds_ = 0;
  int processing_ = 0, deferred_ = 0;
  Histogram ttft_, inter_token_, request_, queue_wait_;
};

}  // namespace opal::server
