// The per-step time budget of the slot scheduler (docs/server.md, "Under load").
//
// While slots generate, a step's length is every stream's inter-token gap, and
// the prompt tokens in it set most of that length. StepCost keeps running
// estimates (exponential moving averages) of what a step costs: the decode
// part (the steps that carry no prompt token, and how many rows they had) and
// each prompt token beyond it (a decode row beyond those measured is charged
// as a prompt token: on a CPU past a few rows both cost about the same compute).
// prompt_tokens_within(budget) is then how many prompt tokens fit a step of
// that many milliseconds beside the generating slots; the engine takes that
// many (between a floor, so prompts always progress, and --prompt-chunk).
// The estimates follow the host: on a loaded machine every token costs more,
// so the chunk shrinks and the gaps stay near the budget.
//
// Slots waiting for their prompts stretch the budget (budget_prompt_chunk):
// a step's length delays every generating stream, but an idle slot that waits
// for its prompt delays its whole request, so the more of the active slots
// wait, the larger the prompt share of a step, up to kMaxStretch budgets (the
// streams' worst gap) or kWaitingChunk tokens, whichever is more.
#pragma once
#include <cstdint>

namespace opal::server {

class StepCost {
 public:
  // One step: n_prompt prompt tokens and n_decode rows of generating slots
  // (their tokens and drafts) took `ms` milliseconds (decode and sampling).
  void observe(int64_t n_prompt, int64_t n_decode, double ms);
  // Prompt tokens that fit a step of budget_ms beside n_decode generating rows
  // (< 0: as many as the decode-only steps measured had); -1 while no step with
  // prompt tokens was measured yet.
  int64_t prompt_tokens_within(double budget_ms, int64_t n_decode = -1) const;
  // The decode part of a step of n_decode rows (< 0: as measured); < 0 while not measured.
  double decode_ms(int64_t n_decode = -1) const;
  double ms_per_prompt_token() const { return per_token_ms_; }  // < 0: not measured yet

 private:
  double decode_ms_ = -1;
  double decode_rows_ = 0;  // rows of the decode-only steps behind decode_ms_ (moving average)
  double per_token_ms_ = -1;
};

// What a step beside generating slots has to serve: the slots generating (one
// row each, plus drafts) and the slots holding a request whose prompt is not
// read yet (idle until it is).
struct StepSlots {
  int64_t generating = 0;
  int64_t waiting = 0;
  int64_t decode_rows = -1;  // the generating slots' rows (tokens and drafts); < 0: as measured
};

// A step stretched by waiting slots is at most this many budgets long (budget_prompt_chunk)...
constexpr double kMaxStretch = 3.0;
// ... or carries at most this many prompt tokens where that is longer: batch matmuls of 32 rows read ~30 % fewer
// tokens a second than batches of 64 (Qwen3-0.6B Q8_0, -t 1, AVX-512: docs/perf/stop16-srv.md), so while slots
// wait for their prompts the time budget alone never cuts a step below this (on a loaded host or a costly model).
constexpr int64_t kWaitingChunk = 64;

// The most prompt tokens one step takes beside generating slots: `cap`
// (--prompt-chunk within -ub) narrowed to what fits budget_ms by `cost`, never
// below min(floor, cap). While slots wait for their prompts, at least the
// waiting slots' share of `cap` (cap * waiting / (generating + waiting)), as
// far as it fits a step of kMaxStretch * budget_ms or kWaitingChunk tokens.
// budget_ms <= 0 or nothing measured yet: cap.
int64_t budget_prompt_chunk(const StepCost& cost, double budget_ms, int64_t cap, int64_t floor,
                            const StepSlots& slots = {});

}  // namespace opal::server
