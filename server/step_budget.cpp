#include "server/step_budget.h"

#include <algorithm>
#include <cmath>

namespace opal::server {

namespace {

// Weight of a new measurement: about the last eight steps count.
constexpr double kAlpha = 0.25;
// Steps with fewer prompt tokens say little about a token's cost (the fixed part dominates them).
constexpr int64_t kMinPromptSample = 8;

double ema(double old, double sample) { return old < 0 ? sample : old + kAlpha * (sample - old); }

}  // namespace

double StepCost::decode_ms(int64_t n_decode) const {
  if (decode_ms_ < 0 || n_decode < 0) return decode_ms_;
  // Rows beyond those measured cost about a prompt token each (compute); fewer rows cost no less (the
  // weights are read once however few there are).
  const double extra = std::max(0.0, double(n_decode) - decode_rows_);
  return decode_ms_ + extra * std::max(per_token_ms_, 0.0);
}

void StepCost::observe(int64_t n_prompt, int64_t n_decode, double ms) {
  if (!(ms >= 0) || !std::isfinite(ms)) return;
  if (n_prompt == 0) {
    if (n_decode > 0) {
      decode_rows_ = decode_ms_ < 0 ? double(n_decode) : decode_rows_ + kAlpha * (double(n_decode) - decode_rows_);
      decode_ms_ = ema(decode_ms_, ms);
    }
    return;
  }
  if (n_prompt < kMinPromptSample) return;
  // The step's fixed part (the weights read once, the generating rows) is about a decode-only step's of as
  // many rows; with none measured yet the whole step is charged to its prompt tokens (an overestimate, so
  // the first chunks err short).
  const double base = std::max(decode_ms(n_decode), 0.0);
  const double per_token = std::max(ms - base, 0.1 * ms) / double(n_prompt);
  per_token_ms_ = ema(per_token_ms_, per_token);
}

int64_t StepCost::prompt_tokens_within(double budget_ms, int64_t n_decode) const {
  if (per_token_ms_ <= 0) return -1;
  const double left = budget_ms - std::max(decode_ms(n_decode), 0.0);
  if (left <= 0) return 0;
  const double n = std::floor(left / per_token_ms_);
  return n > 1e9 ? int64_t(1e9) : int64_t(n);
}

int64_t budget_prompt_chunk(const StepCost& cost, double budget_ms, int64_t cap, int64_t floor,
                            const StepSlots& slots) {
  if (budget_ms <= 0) return cap;
  int64_t n = cost.prompt_tokens_within(budget_ms, slots.decode_rows);
  if (n < 0) return cap;
  if (slots.generating > 0 && slots.waiting > 0) {
    // Waiting slots stretch the step: their share of the cap, within a step of kMaxStretch budgets, or within
    // kWaitingChunk tokens where that is longer (a loaded host or a costly model: small chunks waste compute).
    const int64_t share = cap * slots.waiting / (slots.generating + slots.waiting);
    const int64_t longest =
        std::max(cost.prompt_tokens_within(kMaxStretch * budget_ms, slots.decode_rows), kWaitingChunk);
    n = std::max(n, std::min(share, longest));
  }
  return std::clamp(n, std::min(floor, cap), cap);
}

}  // namespace opal::server
