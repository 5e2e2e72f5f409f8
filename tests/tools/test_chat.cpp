// `opal chat` end to end (stdin turns, template, KV prefix reuse, commands),
// llama.cpp's one-dash multi-letter flags (tools/llama_flags.h) and the shared
// option groups (tools/context_options.h, sampling_options.h): every
// subcommand that runs a model spells the context flags the same way with the
// same help text, and a bad value fails the same way everywhere.
#include <gtest/gtest.h>

#include <fstream>

#include "support/test_support.h"

namespace opal {
namespace {

std::string run(const std::string& args, int* status = nullptr) {
  std::string out;
  const int rc = test::run_command(test::opal_binary() + " " + args, &out);
  if (status) *status = rc;
  return out;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(LlamaFlags, RunAcceptsUbAndCtk) {
  int rc = 0;
  const std::string a = run("run -m " + test::shared_path("models/stories260K.gguf") +
                                " -p 'Once upon a time' -n 8 --temp 0 -t 1 -ub 2 -ctk f32 2>/dev/null",
                            &rc);
  ASSERT_EQ(rc, 0) << a;
  const std::string b = run("run -m " + test::shared_path("models/stories260K.gguf") +
                                " -p 'Once upon a time' -n 8 --temp 0 -t 1 2>/dev/null",
                            &rc);
  ASSERT_EQ(rc, 0) << b;
  // The ubatch size and cache type do not change the greedy text here (the "opal: KV cache" size line does).
  auto text = [](const std::string& out) {
    const size_t begin = out.rfind("opal: KV cache", 0) == 0 ? out.find('\n') + 1 : 0;
    return out.substr(begin, out.find("prompt:") - begin);
  };
  EXPECT_EQ(text(a), text(b));
  EXPECT_NE(text(a).find("Once upon a time"), std::string::npos) << a;
  EXPECT_NE(a.find("generation: 8 tokens"), std::string::npos) << a;
  run("run -m " + test::shared_path("models/stories260K.gguf") + " -p x -n 1 -ctk q9 2>&1", &rc);
  EXPECT_NE(rc, 0);
}

TEST(Chat, DefaultModelContinuesEachTurnAndReusesTheCache) {
  const std::string input = write_file("turns.txt", "And God said\n/clear\nAnd God said\n");
  int rc = 0;
  const std::string out = run("chat -n 12 --temp 0 -t 1 < " + input + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  // Two identical conversations (after /clear) give identical greedy replies.
  const auto first = out.find('\n');
  ASSERT_NE(first, std::string::npos) << out;
  const std::string reply1 = out.substr(0, first);
  EXPECT_GT(reply1.size(), 10u) << out;
  EXPECT_NE(out.find("[conversation cleared]"), std::string::npos) << out;
  EXPECT_NE(out.find(reply1, first + 1), std::string::npos) << out;
  // Summary: 2 user turns evaluated, 24 tokens generated.
  EXPECT_NE(out.find("generation: 24 tokens"), std::string::npos) << out;
}

TEST(Chat, SecondTurnOnlyEvaluatesNewTokens) {
  // Turn 2's rendered prompt starts with turn 1's prompt and reply, so only
  // the new text is evaluated: far fewer prompt tokens than two full renders.
  const std::string input = write_file("two.txt", "In the beginning\nAnd the earth\n");
  int rc = 0;
  const std::string out = run("chat -n 10 --temp 0 -t 1 < " + input + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto p = out.find("prompt: ");
  ASSERT_NE(p, std::string::npos) << out;
  const int n_prompt = std::stoi(out.substr(p + 8));
  // Turn 1: BOS + ~3 tokens; turn 2: ~3 new tokens plus at most a few re-evaluated.
  EXPECT_LT(n_prompt, 16) << out;
  EXPECT_GT(n_prompt, 4) << out;
}

TEST(Chat, SystemPromptAndSingleTurnWithAnotherModel) {
  int rc = 0;
  const std::string out = run("chat -m " + test::shared_path("models/stories260K.gguf") +
                                  " --single-turn -p 'Hello' -sys 'Be kind' -n 5 --temp 0 -t 1 2>&1",
                              &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("no chat template; using ChatML"), std::string::npos) << out;
  EXPECT_NE(out.find("generation: "), std::string::npos) << out;
}

TEST(Chat, MessageLongerThanTheContextIsAnErrorNotACrash) {
  std::string big;
  for (int i = 0; i < 400; ++i) big += "and the LORD spake unto Moses ";
  const std::string input = write_file("big.txt", big + "\n");
  int rc = 0;
  const std::string out = run("chat -n 4 --temp 0 -t 1 -c 64 < " + input + " 2>&1", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("context holds only n_ctx = 64"), std::string::npos) << out;
}

TEST(Chat, LongConversationDropsOldTurnsInsteadOfFailing) {
  std::string turns;
  for (int i = 0; i < 12; ++i) turns += "And Moses said unto the people\n";
  const std::string input = write_file("long.txt", turns);
  int rc = 0;
  const std::string out = run("chat -n 8 --temp 0 -t 1 -c 96 < " + input + " 2>&1", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("generation: 96 tokens"), std::string::npos) << out;
}

// Issue 17's families in `opal chat`: Gemma 3 with Gemma's template from the
// shared set (the tiny GGUF has none), and RWKV-7, whose second turn continues
// the recurrent state (only the new turn's tokens are evaluated) and whose
// /clear resets it (the same first reply again).
TEST(Chat, Gemma3WithGemmaTemplate) {
  const std::string input = write_file("gemma.txt", "Hi\nMore\n");
  int rc = 0;
  const std::string out =
      run("chat -m " + test::golden_model("tiny-gemma3-q8_0") + " --chat-template-file " +
              test::shared_path("chat-templates/gemma3-it/template.jinja") + " -n 6 --temp 0 -t 1 < " + input + " 2>&1",
          &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("using ChatML"), std::string::npos) << out;
  EXPECT_NE(out.find("generation: "), std::string::npos) << out;
  // "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n" is 9 tokens in
  // this vocabulary; the second turn adds the reply's end and the new turn.
  const auto p = out.find("prompt: ");
  ASSERT_NE(p, std::string::npos) << out;
  EXPECT_GT(std::stoi(out.substr(p + 8)), 9) << out;
}

TEST(Chat, Rwkv7ContinuesTheStateAndClearResetsIt) {
  const std::string model = test::golden_model("tiny-rwkv7-q8_0");
  const std::string input = write_file("rwkv.txt", "Hello there\n/clear\nHello there\n");
  int rc = 0;
  const std::string out = run("chat -m " + model + " -n 6 --temp 0 -t 1 --ignore-eos < " + input + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto first = out.find('\n', out.find("ChatML") + 1);
  ASSERT_NE(first, std::string::npos) << out;
  const auto end1 = out.find('\n', first + 1);
  const std::string reply1 = out.substr(first + 1, end1 - first - 1);
  EXPECT_FALSE(reply1.empty()) << out;
  EXPECT_NE(out.find("[conversation cleared]"), std::string::npos) << out;
  EXPECT_NE(out.find(reply1, end1), std::string::npos) << out;
  // Two turns without /clear: the second evaluates only its new tokens.
  const std::string long_turn = "Hello there, tell me a long story about a little girl named Lily who lived in a house";
  const std::string two = write_file("rwkv2.txt", long_turn + "\nAnd then\n");
  const std::string out2 = run("chat -m " + model + " -n 6 --temp 0 -t 1 --ignore-eos < " + two + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out2;
  const std::string one = write_file("rwkv1.txt", long_turn + "\n");
  const std::string out1 = run("chat -m " + model + " -n 6 --temp 0 -t 1 --ignore-eos < " + one + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out1;
  auto prompt_tokens = [](const std::string& o) {
    const auto p = o.find("prompt: ");
    return p == std::string::npos ? -1 : std::stoi(o.substr(p + 8));
  };
  const int n1 = prompt_tokens(out1), n2 = prompt_tokens(out2);
  ASSERT_GT(n1, 0) << out1;
  // Turn 2 re-rendered in full starts with turn 1's whole prompt; from the
  // state checkpoint at its end only the rest is evaluated (the reply, as
  // re-tokenized, and the new turn: fewer tokens than turn 1's long prompt),
  // where a re-evaluation from scratch would cost turn 1's prompt again.
  EXPECT_GT(n2, n1) << out2;
  EXPECT_LT(n2, 2 * n1) << out2;
}

TEST(CliOptions, ContextFlagsHaveOneHelpText) {
  for (const char* cmd : {"run", "chat", "perplexity", "serve", "bench", "logits"}) {
    int rc = 0;
    const std::string help = run(std::string(cmd) + " --help 2>&1", &rc);
    ASSERT_EQ(rc, 0) << cmd << ": " << help;
    // bench takes lists (llama-bench's form), so its lines gain " ..." and ", a list"; the text is the same.
    const bool bench = std::string(cmd) == "bench";
    EXPECT_NE(help.find(bench ? "--ctk,--cache-type-k TEXT ..." : "--ctk,--cache-type-k TEXT   K cache type"),
              std::string::npos)
        << cmd << ": " << help;
    EXPECT_NE(help.find("K cache type: f16, bf16, f32, q8_0 or q4_0"), std::string::npos) << cmd << ": " << help;
    EXPECT_NE(help.find("(default f16; llama.cpp: -ctk)"), std::string::npos) << cmd << ": " << help;
    EXPECT_NE(help.find("--ctv,--cache-type-v TEXT"), std::string::npos) << cmd << ": " << help;
    EXPECT_NE(help.find("V cache type: f16, bf16, f32, q8_0 or q4_0"), std::string::npos) << cmd << ": " << help;
    EXPECT_NE(help.find("--fa,--flash-attn"), std::string::npos) << cmd << ": " << help;
    EXPECT_NE(help.find("compute threads"), std::string::npos) << cmd;
    EXPECT_NE(help.find("--backend"), std::string::npos) << cmd;
    EXPECT_NE(help.find("--perf-log"), std::string::npos) << cmd;
    if (std::string(cmd) != "logits") {
      EXPECT_NE(help.find("logical batch size: most tokens one decode call takes"), std::string::npos) << cmd;
    }
  }
  for (const char* cmd : {"run", "chat"}) {
    const std::string help = run(std::string(cmd) + " --help 2>&1");
    for (const char* flag : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty",
                             "--frequency-penalty", "-s,--seed"})
      EXPECT_NE(help.find(flag), std::string::npos) << cmd << " lacks " << flag;
  }
}

TEST(CliOptions, BadCacheTypeIsTheSameErrorEverywhere) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  const std::string out_prefix = test::temp_dir() + "/x";
  for (const std::string& args :
       {"run -m " + model + " -p x", "chat -m " + model + " --single-turn -p x",
        "perplexity -m " + model + " -f /dev/null", "logits -m " + model + " --tokens 1 --out " + out_prefix}) {
    int rc = 0;
    const std::string out = run(args + " -ctk q9 2>&1", &rc);
    EXPECT_EQ(rc, 1) << args << ": " << out;
    EXPECT_NE(out.find("-ctk must be f16, bf16, f32, q8_0 or q4_0, got 'q9'"), std::string::npos)
        << args << ": " << out;
  }
}

// Speculative decoding through the binaries (docs/speculative.md): `opal run` and `opal chat` print the same
// greedy text with n-gram drafts and with the model as its own draft (every draft token accepted).
TEST(Speculative, RunAndChatPrintTheSameTextWithDrafts) {
  const std::string m = test::shared_path("models/stories260K.gguf");
  // Without the draft model's line (stderr) where there is one.
  auto no_draft_line = [](std::string out) {
    const size_t at = out.find("opal: draft model: ");
    if (at != std::string::npos) out.erase(at, out.find('\n', at) + 1 - at);
    return out;
  };
  // The generated text: after the "opal: KV cache" line (stderr), before the summary.
  auto text = [&](const std::string& with_draft_line) {
    const std::string out = no_draft_line(with_draft_line);
    const size_t begin = out.find('\n') + 1;
    return out.substr(begin, out.find("prompt:") - begin);
  };
  int rc = 0;
  const std::string base = "run -m " + m + " -p 'Once upon a time' -n 120 --temp 0 -t 1 ";
  const std::string plain = run(base + "2>&1", &rc);
  ASSERT_EQ(rc, 0) << plain;
  const std::string ngram = run(base + "--spec-type ngram-simple 2>&1", &rc);
  ASSERT_EQ(rc, 0) << ngram;
  EXPECT_EQ(text(ngram), text(plain)) << ngram;
  EXPECT_NE(text(plain).find("Once upon a time"), std::string::npos) << plain;
  EXPECT_NE(ngram.find("speculative: ngram-simple:"), std::string::npos) << ngram;
  const std::string self = run(base + "-md " + m + " --draft-p-min 0 2>&1", &rc);
  ASSERT_EQ(rc, 0) << self;
  EXPECT_EQ(text(self), text(plain)) << self;
  EXPECT_NE(self.find("accepted (100.0 %)"), std::string::npos) << self;
  const std::string input = write_file("spec_turns.txt", "Tell me a story\nAnd then?\n");
  const std::string chat = "chat -m " + m + " -n 40 --temp 0 -t 1 ";
  const std::string c_plain = run(chat + "< " + input, &rc);
  ASSERT_EQ(rc, 0) << c_plain;
  const std::string c_spec = no_draft_line(run(chat + "-md " + m + " --draft-p-min 0 < " + input, &rc));
  ASSERT_EQ(rc, 0) << c_spec;
  EXPECT_EQ(c_spec.substr(0, c_spec.find("prompt:")), c_plain.substr(0, c_plain.find("prompt:")));
  EXPECT_GT(c_plain.find("prompt:"), 60u) << c_plain;  // two replies before the summary
  EXPECT_NE(c_spec.find("accepted (100.0 %)"), std::string::npos) << c_spec;
}

}  // namespace
}  // namespace opal
