#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace opal::server {
namespace {

std::vector<double> latency_buckets() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}; }
std::vector<double> token_gap_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

Metrics::Metrics()
    : ttft_(latency_buckets()),
      inter_token_(token_gap_buckets()),
      request_(latency_buckets()),
      queue_wait_(latency_buckets()) {}

void Metrics::add_prompt(int64_t n, double s) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += uint64_t(n);
  prompt_seconds_ += s;
}
void Metrics::add_predicted(int64_t n, double s) {
  std::lock_guard<std::mutex> lk(mu_);
  predicted_tokens_ += uint64_t(n);
  predicted_seconds_ += s;
}
void Metrics::add_decode(int n_busy) {
  std::lock_guard<std::mutex> lk(mu_);
  ++n_decode_;
  busy_slots_sum_ += uint64_t(n_busy);
}
void Metrics::set_processing(int p, int d) {
  std::lock_guard<std::mutex> lk(mu_);
  processing_ = p;
  deferred_ = d;
}
void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}
void Metrics::observe_inter_token(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  inter_token_.observe(s);
}
void Metrics::observe_request(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  request_.observe(s);
}
void Metrics::observe_queue_wait(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_wait_.observe(s);
}
void Metrics::add_request_finished() {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_;
}

void Metrics::add_request_cancelled() {
  std::lock_guard<std::mutex> lk(mu_);
  ++cancelled_;
}

void Metrics::add_draft(int64_t n, int64_t accepted) {
  std::lock_guard<std::mutex> lk(mu_);
  draft_tokens_ += uint64_t(n);
  draft_accepted_ += uint64_t(accepted);
}

void Metrics::add_draft_decodes(int64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  draft_decodes_ += uint64_t(n);
  ++draft_rounds_;
}

Metrics::Snapshot Metrics::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {prompt_tokens_, predicted_tokens_, n_decode_, requests_, cancelled_, ttft_.count()};
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  scalar(out, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", double(prompt_tokens_));
  scalar(out, "llamacpp:prompt_seconds_total", "counter", "Prompt process time", prompt_seconds_);
  scalar(out, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
         double(predicted_tokens_));
  scalar(out, "llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", predicted_seconds_);
  scalar(out, "llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls", double(n_decode_));
  scalar(out, "opal:requests_finished_total", "counter", "Completion requests that finished.", double(requests_));
  scalar(out, "opal:requests_cancelled_total", "counter", "Requests whose client went away before the end.",
         double(cancelled_));
  scalar(out, "opal:draft_tokens_total", "counter", "Speculative decoding: draft tokens verified by the model.",
         double(draft_tokens_));
  scalar(out, "opal:draft_tokens_accepted_total", "counter", "Speculative decoding: draft tokens accepted.",
         double(draft_accepted_));
  scalar(out, "opal:draft_decodes_total", "counter",
         "Speculative decoding: draft-model decodes (each drafts one position for every drafting slot).",
         double(draft_decodes_));
  scalar(out, "opal:draft_rounds_total", "counter",
         "Speculative decoding: engine steps that drafted with a draft model.", double(draft_rounds_));
  scalar(out, "llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
         n_decode_ ? double(busy_slots_sum_) / double(n_decode_) : 0.0);
  scalar(out, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         prompt_seconds_ > 0 ? double(prompt_tokens_) / prompt_seconds_ : 0.0);
  scalar(out, "llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         predicted_seconds_ > 0 ? double(predicted_tokens_) / predicted_seconds_ : 0.0);
  scalar(out, "llamacpp:requests_processing", "gauge", "Number of requests processing.", double(processing_));
  scalar(out, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", double(deferred_));
  ttft_.render(out, "opal:time_to_first_token_seconds", "Time from request arrival to the first generated token.");
  inter_token_.render(out, "opal:inter_token_latency_seconds",
                      "Time between consecutive generated tokens of a request.");
  request_.render(out, "opal:request_latency_seconds", "Time from request arrival to its last token.");
  queue_wait_.render(out, "opal:queue_wait_seconds", "Time a request waited for a free slot.");
  return out;
}

}  // namespace opal::server
