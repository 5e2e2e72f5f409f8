// The step budget's estimates (server/step_budget.h): from the steps' measured costs, how many prompt tokens
// fit a step of a given length beside the generating slots.
#include <gtest/gtest.h>

#include <limits>

#include "server/step_budget.h"

namespace opal::server {
namespace {

TEST(StepBudget, UnknownUntilAPromptStepIsMeasured) {
  StepCost c;
  EXPECT_EQ(c.prompt_tokens_within(100), -1);
  EXPECT_EQ(budget_prompt_chunk(c, 100, 256, 32), 256) << "nothing measured: the cap";
  c.observe(0, 4, 20);  // decode-only steps say nothing of a prompt token's cost
  EXPECT_EQ(c.prompt_tokens_within(100), -1);
  EXPECT_DOUBLE_EQ(c.decode_ms(), 20);
  c.observe(4, 4, 40);  // too few prompt tokens to tell their cost from the step's fixed part
  EXPECT_EQ(c.prompt_tokens_within(100), -1);
}

TEST(StepBudget, FitsThePromptTokensBesideTheDecodePart) {
  StepCost c;
  c.observe(0, 16, 50);     // a decode step of 16 slots: 50 ms
  c.observe(100, 16, 250);  // 100 prompt tokens beside them: 2 ms each
  EXPECT_DOUBLE_EQ(c.ms_per_prompt_token(), 2);
  EXPECT_EQ(c.prompt_tokens_within(150), 50);  // (150 - 50) / 2
  EXPECT_EQ(c.prompt_tokens_within(40), 0);    // the decode part alone is over the budget
  EXPECT_EQ(budget_prompt_chunk(c, 150, 256, 32), 50);
  EXPECT_EQ(budget_prompt_chunk(c, 150, 20, 32), 20) << "never above the cap (--prompt-chunk)";
  EXPECT_EQ(budget_prompt_chunk(c, 40, 256, 32), 32) << "never below the floor: prompts go on";
  EXPECT_EQ(budget_prompt_chunk(c, 0, 256, 32), 256) << "no budget: the cap";
  EXPECT_EQ(budget_prompt_chunk(c, 10000, 256, 32), 256);
}

TEST(StepBudget, FollowsTheHostAsCostsChange) {
  StepCost c;
  c.observe(0, 4, 10);
  c.observe(100, 4, 110);  // 1 ms a prompt token
  const int64_t quiet = c.prompt_tokens_within(110);
  EXPECT_EQ(quiet, 100);
  for (int i = 0; i < 30; ++i) {  // the host gets busy: every step costs twice as much
    c.observe(0, 4, 20);
    c.observe(50, 4, 120);
  }
  const int64_t busy = c.prompt_tokens_within(110);
  EXPECT_LT(busy, quiet);
  EXPECT_NEAR(double(busy), 45, 1) << "(110 - 20) / 2";
}

TEST(StepBudget, RowsBeyondTheMeasuredDecodeCostAPromptTokenEach) {
  StepCost c;
  c.observe(0, 4, 20);     // a decode step of 4 rows: 20 ms
  c.observe(100, 4, 120);  // 1 ms a prompt token
  EXPECT_DOUBLE_EQ(c.decode_ms(4), 20);
  EXPECT_DOUBLE_EQ(c.decode_ms(10), 26) << "6 rows more, 1 ms each";
  EXPECT_DOUBLE_EQ(c.decode_ms(2), 20) << "fewer rows read the same weights";
  EXPECT_EQ(c.prompt_tokens_within(150, 10), 124);
  c.observe(100, 10, 226);  // measured beside 10 rows: the rows' part is not charged to the prompt tokens
  EXPECT_DOUBLE_EQ(c.ms_per_prompt_token(), 1.25) << "(226 - 26) / 100 = 2, averaged in with weight 1/4";
}

TEST(StepBudget, WaitingSlotsGetTheirShareOfTheChunk) {
  StepCost c;
  c.observe(0, 4, 20);
  c.observe(100, 4, 120);  // 1 ms a prompt token: 130 fit a 150 ms budget beside 4 rows
  StepSlots none{4, 0, 4};
  EXPECT_EQ(budget_prompt_chunk(c, 150, 256, 32, none), 130) << "no slot waits: the budget alone";
  StepSlots many{4, 12, 4};
  EXPECT_EQ(budget_prompt_chunk(c, 150, 256, 32, many), 192) << "12 of 16 active slots wait: 3/4 of the cap";
  StepSlots few{4, 4, 4};
  EXPECT_EQ(budget_prompt_chunk(c, 150, 256, 32, few), 130) << "their share (128) is under what the budget fits";
  StepSlots all{0, 16, 0};
  EXPECT_EQ(budget_prompt_chunk(c, 150, 256, 32, all), 130) << "nothing generates: the engine takes n_batch";
  EXPECT_EQ(budget_prompt_chunk(c, 0, 256, 32, many), 256) << "no budget: the cap";
}

TEST(StepBudget, StretchStopsAtThreeBudgetsOrAnEfficientChunk) {
  // A cheap model (1 ms a prompt token): three budgets fit 410 tokens, so the waiting slots' share decides.
  StepCost cheap;
  cheap.observe(0, 16, 40);
  cheap.observe(100, 16, 140);
  EXPECT_EQ(budget_prompt_chunk(cheap, 150, 256, 32, {4, 12, 4}), 192);
  EXPECT_EQ(budget_prompt_chunk(cheap, 150, 256, 32, {8, 8, 8}), 128);
  EXPECT_EQ(budget_prompt_chunk(cheap, 150, 256, 32, {12, 4, 12}), 110) << "a share of 64, under the budget's 110";
  // 2 ms a token beside a 100 ms decode part: the budget alone fits 25 (the floor), three budgets 175.
  StepCost mid;
  mid.observe(0, 16, 100);
  mid.observe(100, 16, 300);
  EXPECT_EQ(budget_prompt_chunk(mid, 150, 256, 32, {4, 0, 4}), 32) << "nobody waits: the floor";
  EXPECT_EQ(budget_prompt_chunk(mid, 150, 256, 32, {4, 12, 4}), 175) << "a share of 192, three budgets' worth";
  // 8 ms a token: three budgets fit 43, fewer than kWaitingChunk (64), which then bounds the share.
  StepCost slow;
  slow.observe(0, 16, 100);
  slow.observe(100, 16, 900);
  EXPECT_EQ(budget_prompt_chunk(slow, 150, 256, 32, {4, 12, 4}), kWaitingChunk) << "a share of 192";
  EXPECT_EQ(budget_prompt_chunk(slow, 150, 256, 32, {8, 8, 8}), kWaitingChunk) << "a share of 128";
  EXPECT_EQ(budget_prompt_chunk(slow, 150, 256, 32, {13, 3, 13}), 48) << "a share of 48";
  EXPECT_EQ(budget_prompt_chunk(slow, 150, 256, 32, {15, 1, 15}), 32) << "a share of 16: the floor";
  // A loaded host: the decode part alone fills three budgets; the chunk is still kWaitingChunk, within the cap.
  StepCost busy;
  busy.observe(0, 16, 500);
  busy.observe(100, 16, 1500);
  EXPECT_EQ(budget_prompt_chunk(busy, 150, 256, 32, {1, 15, 1}), kWaitingChunk);
  EXPECT_EQ(budget_prompt_chunk(busy, 150, 60, 32, {1, 15, 1}), 56) << "the share of a cap of 60: 60 * 15 / 16";
}

TEST(StepBudget, IgnoresMeaninglessTimes) {
  StepCost c;
  c.observe(0, 4, -1);
  c.observe(100, 4, std::numeric_limits<double>::quiet_NaN());
  c.observe(100, 4, std::numeric_limits<double>::infinity());
  EXPECT_LT(c.decode_ms(), 0);
  EXPECT_EQ(c.prompt_tokens_within(100), -1);
}

}  // namespace
}  // namespace opal::server
