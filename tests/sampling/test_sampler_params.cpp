// Parameters: llama.cpp's defaults and sampler names, and clear errors for
// every out-of-range value.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling_test_util.h"
#include "support/test_support.h"

using namespace opal;

namespace {

using opal::test::expect_error;

void expect_param_error(void (*edit)(SamplerParams&), const std::string& needle) {
  SamplerParams p;
  edit(p);
  expect_error([&] { validate(p, 100); }, needle);
  expect_error([&] { Sampler s(p, 100); }, needle);
}

}  // namespace

// The values of llama.cpp's common_params_sampling (common/common.h).
TEST(SamplerParams, DefaultsAreLlamaCpps) {
  SamplerParams p;
  EXPECT_FLOAT_EQ(p.temp, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.typical_p, 1.0f);
  EXPECT_FLOAT_EQ(p.top_n_sigma, -1.0f);
  EXPECT_FLOAT_EQ(p.xtc_probability, 0.0f);
  EXPECT_FLOAT_EQ(p.xtc_threshold, 0.1f);
  EXPECT_EQ(p.min_keep, 0);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.repeat_last_n, 64);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_EQ(p.seed, 0xFFFFFFFFu);
  EXPECT_EQ(p.n_probs, 0);
  const std::vector<std::string> llama_order = {"penalties", "dry",   "top_n_sigma", "top_k",      "typ_p",
                                                "top_p",     "min_p", "xtc",         "temperature"};
  EXPECT_EQ(p.order, llama_order);
  EXPECT_EQ(default_sampler_order(), llama_order);
  EXPECT_NO_THROW(validate(p, 32000));
}

TEST(SamplerParams, ParsesCanonicalAndAlternativeNames) {
  EXPECT_EQ(parse_sampler_names("penalties;top-k;nucleus;typical;min-p;temp"),
            (std::vector<std::string>{"penalties", "top_k", "top_p", "typ_p", "min_p", "temperature"}));
  EXPECT_EQ(parse_sampler_names("top_k; temperature ;"), (std::vector<std::string>{"top_k", "temperature"}));
  EXPECT_EQ(parse_sampler_names(""), std::vector<std::string>{});
  // llama.cpp's --sampling-seq default letters give the default order.
  EXPECT_EQ(parse_sampler_letters("edskypmxt"), default_sampler_order());
}

TEST(SamplerParams, UnknownOrUnsupportedNamesAreErrors) {
  expect_error([] { parse_sampler_names("top_k;bogus"); }, "bogus");
  expect_error([] { parse_sampler_names("infill"); }, "does not implement");
  expect_error([] { parse_sampler_letters("kq"); }, "'q'");
  expect_param_error([](SamplerParams& p) { p.order = {"top_k", "mirostat"}; }, "mirostat");
  expect_param_error([](SamplerParams& p) { p.order = {"adaptive_p"}; }, "adaptive_p");
  // Alternative names are fine in params.order too.
  SamplerParams p;
  p.order = {"top-k", "temp"};
  Sampler s(p, 10);
  EXPECT_EQ(s.chain_description(), "logits -> top_k -> temperature -> dist");
}

TEST(SamplerParams, OutOfRangeValuesNameTheField) {
  expect_param_error([](SamplerParams& p) { p.top_p = 1.5f; }, "top_p");
  expect_param_error([](SamplerParams& p) { p.top_p = -0.1f; }, "top_p");
  expect_param_error([](SamplerParams& p) { p.top_p = NAN; }, "top_p");
  expect_param_error([](SamplerParams& p) { p.min_p = 2.0f; }, "min_p");
  expect_param_error([](SamplerParams& p) { p.typical_p = -1.0f; }, "typical_p");
  expect_param_error([](SamplerParams& p) { p.temp = NAN; }, "temperature");
  expect_param_error([](SamplerParams& p) { p.temp = INFINITY; }, "temperature");
  expect_param_error([](SamplerParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty");
  expect_param_error([](SamplerParams& p) { p.repeat_last_n = -2; }, "repeat_last_n");
  expect_param_error([](SamplerParams& p) { p.presence_penalty = NAN; }, "presence_penalty");
  expect_param_error([](SamplerParams& p) { p.frequency_penalty = INFINITY; }, "frequency_penalty");
  expect_param_error([](SamplerParams& p) { p.min_keep = -1; }, "min_keep");
  expect_param_error([](SamplerParams& p) { p.n_probs = -3; }, "n_probs");
  expect_param_error([](SamplerParams& p) { p.xtc_probability = 1.1f; }, "xtc_probability");
  expect_param_error([](SamplerParams& p) { p.logit_bias = {{100, 1.0f}}; }, "logit_bias token 100");
  expect_param_error([](SamplerParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias token -1");
  expect_param_error([](SamplerParams& p) { p.logit_bias = {{3, NAN}}; }, "logit_bias");
  expect_error([] { validate(SamplerParams{}, 0); }, "vocabulary size");
  // Boundary values are accepted.
  SamplerParams ok;
  ok.top_p = 0.0f;
  ok.min_p = 1.0f;
  ok.temp = -1.0f;
  ok.repeat_last_n = -1;
  ok.logit_bias = {{0, -INFINITY}, {99, 3.0f}};
  EXPECT_NO_THROW(validate(ok, 100));
}

TEST(SamplerParams, MisuseOfTheSamplerIsAnError) {
  Sampler s(test::plain_params(), 10);
  expect_error([&] { s.accept(10); }, "token 10");
  expect_error([&] { s.accept(-1); }, "token -1");
  expect_error([&] { s.top_probs(3); }, "before sample()");
  expect_error([&] { s.chosen_logprob(); }, "before sample()");
  expect_error([&] { s.sample(nullptr); }, "no logits");
}

TEST(SamplerParams, RandomSeedIsDrawnAndFixedSeedIsKept) {
  SamplerParams p = test::plain_params(42);
  EXPECT_EQ(Sampler(p, 4).seed(), 42u);
  p.seed = kRandomSeed;
  Sampler a(p, 4), b(p, 4);
  // Two independent 32-bit draws coincide with probability 2^-32.
  EXPECT_NE(a.seed(), b.seed());
  EXPECT_NE(a.seed(), kRandomSeed);
}
