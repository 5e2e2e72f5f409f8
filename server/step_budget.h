// The per-step time budget of the slot scheduler (docs/server.md, "Under load").
//
// While slots generate, a step's length is every stream's inter-token gap, and
// the prompt tokens in it set most of that length. StepCost keeps running
// estimates (exponential moving averages) of what a step costs: the decode
// part (the steps that carry no prompt token) and each prompt token beyond it.
// prompt_tokens_within(budget) is then how many prompt tokens fit a step of
// that many milliseconds beside the generating slots; the engine takes that
// many (between a floor, so prompts always progress, and --prompt-chunk).
// The estimates follow the host: on a loaded machine every token costs more,
// so the chunk shrinks and the gaps stay near the budget.
#pragma once
#include <cstdint>

namespace opal::server {

class StepCost {
 public:
  // One step: n_prompt prompt tokens and n_decode rows of generating slots
  // (their tokens and drafts) took `ms` milliseconds (decode and sampling).
  void observe(int64_t n_prompt, int64_t n_decode, double ms);
  // Prompt tokens that fit a step of budget_ms beside the decode part; -1
  // while no step with prompt tokens was measured yet.
  int64_t prompt_tokens_within(double budget_ms) const;
  double decode_ms() const { return decode_ms_; }               // < 0: not measured yet
  double ms_per_prompt_token() const { return per_token_ms_; }  // < 0: not measured yet

 private:
  double decode_ms_ = -1;
  double per_token_ms_ = -1;
};

// The most prompt tokens one step takes beside generating slots: `cap`
// (--prompt-chunk within -ub) narrowed to what fits budget_ms by `cost`, never
// below min(floor, cap). budget_ms <= 0 or nothing measured yet: cap.
int64_t budget_prompt_chunk(const StepCost& cost, double budget_ms, int64_t cap, int64_t floor);

}  // namespace opal::server
