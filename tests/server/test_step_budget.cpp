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
