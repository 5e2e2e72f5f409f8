// Continuous batching and slot lifetime: concurrent requests share decode steps
// without changing greedy results; a client that disconnects frees its slot.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "server/server_test_util.h"
#include "server/slots.h"

namespace opal::test {
namespace {

const char* kPrompts[] = {"Once upon a time", "The dog ran to the", "Lily had a big red ball",
                          "One day, a little boy named Tom"};

json completion(LocalServer& s, const std::string& prompt, int n) {
  auto r = s.post("/completion", {{"prompt", prompt}, {"n_predict", n}, {"temperature", 0}, {"cache_prompt", false}});
  EXPECT_TRUE(r);
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// While `hold` is set, the engine's next decode waits (at most `seconds`) until `n` requests are in the
// server (*self), so they share steps however the host schedules the client threads; then it clears `hold`.
void hold_decode_until_in_flight(server::ServerOptions& o, std::atomic<bool>& hold, std::atomic<LocalServer*>& self,
                                 int n, int seconds = 30) {
  o.before_decode = [&hold, &self, n, seconds] {
    if (!hold.load()) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (self.load()->server().in_flight() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    hold = false;
  };
}

// Each engine step's (tokens, generating slots); once `armed`, the first step with a generating slot sets
// `hold` (hold_decode_until_in_flight) and disarms.
struct StepRecord {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> batches;
};
void record_steps(server::ServerOptions& o, std::shared_ptr<StepRecord> rec, std::atomic<bool>& armed,
                  std::atomic<bool>& hold) {
  o.on_batch = [rec, &armed, &hold](int64_t n_tokens, int64_t n_generating) {
    if (n_generating > 0 && armed.exchange(false)) hold = true;
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->batches.emplace_back(n_tokens, n_generating);
  };
}

// Options whose step decisions are the policy's, not the host's: n_ubatch 512, --prompt-chunk 256, a 110 ms step
// budget, and step costs from the step_cost_ms seam (10 ms a step + 1 ms a prompt token).
server::ServerOptions seam_budget_options(int slots) {
  server::ServerOptions o = default_options(slots, slots * 1024);
  o.n_ubatch = 512;
  o.prompt_chunk = 256;
  o.step_budget_ms = 110;
  o.step_cost_ms = [](int64_t n_prompt, int64_t) { return 10.0 + double(n_prompt); };
  return o;
}

// The steps of a server recorded (record_steps); once `armed`, its first generating step waits until `n` requests
// are in it (hold_decode_until_in_flight). Declare it before the LocalServer and set `self` to it.
struct HeldSteps {
  std::shared_ptr<StepRecord> rec = std::make_shared<StepRecord>();
  std::atomic<bool> armed{false}, hold{false};
  std::atomic<LocalServer*> self{nullptr};
  void attach(server::ServerOptions& o, int n) {
    record_steps(o, rec, armed, hold);
    hold_decode_until_in_flight(o, hold, self, n);
  }
};

// A long prompt: `n` sentences of one story (about 15 tokens each).
std::string story_prompt(int n) {
  std::string p;
  for (int i = 0; i < n; ++i) p += "Lily had a big red ball and she liked to play with it in the park. ";
  return p;
}

// Waits (at most `seconds`) until done() holds; whether it did.
template <class Done>
bool wait_until(Done done, int seconds = 60) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST(ServerBatching, ConcurrentGreedyEqualsSequential) {
  // The concurrent phase's first decode waits until all four requests are in the server (at most 30 s), so
  // they overlap however the host schedules the client threads (on a loaded host each could otherwise finish
  // its 24 steps before the next one arrives).
  std::atomic<bool> hold{false};
  std::atomic<LocalServer*> self{nullptr};
  auto opts = default_options(2);
  hold_decode_until_in_flight(opts, hold, self, 4);
  LocalServer s(opts);
  self = &s;
  std::vector<std::string> sequential;
  for (const char* p : kPrompts) sequential.push_back(completion(s, p, 24)["content"]);

  const std::string before = s.get("/metrics")->body;
  std::vector<std::string> concurrent(4);
  std::vector<std::thread> threads;
  hold = true;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { concurrent[size_t(i)] = completion(s, kPrompts[i], 24)["content"]; });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(concurrent[size_t(i)], sequential[size_t(i)]) << kPrompts[i];

  // Shared decode steps happened: one request alone needs 24 decodes (prompt + 23 tokens),
  // so four in turn need 96; two slots decoding together need about half.
  const std::string after = s.get("/metrics")->body;
  const double decodes =
      metric_value(after, "llamacpp:n_decode_total") - metric_value(before, "llamacpp:n_decode_total");
  EXPECT_LE(decodes, 80);
  EXPECT_GT(metric_value(after, "llamacpp:n_busy_slots_per_decode"), 1.0);
}

TEST(ServerBatching, StreamsInterleaveAcrossSlots) {
  LocalServer s(default_options(4));
  std::vector<SseStream> streams(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      streams[size_t(i)] = post_stream(
          "127.0.0.1", s.port(), "/v1/completions",
          {{"prompt", kPrompts[i]}, {"max_tokens", 20}, {"temperature", 0}, {"stream", true}, {"cache_prompt", false}});
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(streams[size_t(i)].well_formed) << streams[size_t(i)].error;
    EXPECT_TRUE(streams[size_t(i)].done_marker);
    EXPECT_EQ(chat_stream_text(streams[size_t(i)]), completion(s, kPrompts[i], 20)["content"]);
  }
}

TEST(ServerBatching, MoreRequestsThanSlotsQueue) {
  LocalServer s(default_options(1));
  std::vector<json> out(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { out[size_t(i)] = completion(s, kPrompts[i], 8); });
  for (auto& t : threads) t.join();
  for (const json& j : out) EXPECT_EQ(j["tokens_predicted"], 8);
  const std::string m = s.get("/metrics")->body;
  EXPECT_EQ(metric_value(m, "opal:queue_wait_seconds_count"), 3);
}

TEST(ServerBatching, DisconnectMidStreamFreesSlot) {
  LocalServer s(default_options(1, 2048));
  {
    httplib::Client c("127.0.0.1", s.port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/completion";
    req.body = json{{"prompt", "Once upon a time"}, {"n_predict", 1900}, {"ignore_eos", true}, {"stream", true}}.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // hang up
    auto r = c.send(req);
    EXPECT_FALSE(r);  // cancelled by the receiver
    EXPECT_GE(chunks, 3);
  }
  // With one slot, the next request can only run once the first one's slot is free.
  const json next = completion(s, "Lily had a big red ball", 4);
  EXPECT_EQ(next["tokens_predicted"], 4);
  const std::string m = s.get("/metrics")->body;
  EXPECT_EQ(metric_value(m, "opal:requests_cancelled_total"), 1);
  EXPECT_LT(metric_value(m, "llamacpp:tokens_predicted_total"), 1900);
  auto h = s.get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST(ServerBatching, ShutdownEndsInFlightStreamsWithFinalEvent) {
  auto s = std::make_unique<LocalServer>(default_options(2, 2048));
  std::atomic<int> chunks{0};
  std::string raw;
  std::thread client = stream_hi_chat(s->port(), &raw, &chunks);
  while (chunks.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.reset();  // shutdown + wait
  client.join();
  const SseStream st = parse_sse(raw);
  ASSERT_TRUE(st.well_formed) << st.error;
  EXPECT_TRUE(st.done_marker);
  EXPECT_EQ(st.events.back()["choices"][0]["finish_reason"], "abort");  // cut, not a natural end
}

// Decode priority: while a slot generates, a long prompt arriving on another slot is read one ubatch per step
// (each step also carrying the generating slot's token), so no step makes the generating slot wait for more
// than n_ubatch tokens, nor for more than prompt_chunk prompt tokens when that is set; with nothing
// generating, a prompt takes up to n_batch tokens in one step. The answers stay those of the requests alone.
// With a step budget (budget_ms > 0), the steps' costs come from the model 10 ms + 1 ms per prompt token (the
// step_cost_ms seam, not the host's clock), so beside a generating slot a step takes at most budget_ms - 10
// prompt tokens.
void batching_check_mixed_steps(int64_t n_ubatch, int64_t prompt_chunk, double budget_ms = 0) {
  server::ServerOptions o = default_options(2, 2048);
  o.n_ubatch = n_ubatch;
  o.prompt_chunk = prompt_chunk;
  o.step_budget_ms = budget_ms;
  if (budget_ms > 0) o.step_cost_ms = [](int64_t n_prompt, int64_t) { return 10.0 + double(n_prompt); };
  auto rec = std::make_shared<StepRecord>();
  // Once armed, the first step with a generating slot waits (at most 30 s) until the long request is in the
  // server too, so the two overlap however the host schedules the client threads (the short answer's 120 steps
  // could otherwise all run before the long prompt arrives).
  std::atomic<bool> armed{false}, hold{false};
  std::atomic<LocalServer*> self{nullptr};
  record_steps(o, rec, armed, hold);
  hold_decode_until_in_flight(o, hold, self, 2);
  LocalServer s(o);
  self = &s;
  const std::string long_prompt = story_prompt(12);
  const std::string alone_long = completion(s, long_prompt, 4)["content"];
  const std::string alone_short = completion(s, kPrompts[0], 120)["content"];
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    ASSERT_FALSE(rec->batches.empty());
    EXPECT_GT(rec->batches.front().first, n_ubatch) << "a prompt alone is read in one step of up to n_batch tokens";
    rec->batches.clear();
  }

  std::string together_short;
  armed = true;
  std::thread generating([&] { together_short = completion(s, kPrompts[0], 120)["content"]; });
  const auto batching_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {  // the first request is generating
    if (std::chrono::steady_clock::now() > batching_deadline) {
      ADD_FAILURE() << "the first request never generated";
      break;
    }
    {
      std::lock_guard<std::mutex> lk(rec->mu);
      if (!rec->batches.empty() && rec->batches.back().second > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string together_long = completion(s, long_prompt, 4)["content"];
  generating.join();
  EXPECT_EQ(together_long, alone_long);
  EXPECT_EQ(together_short, alone_short);

  std::lock_guard<std::mutex> lk(rec->mu);
  int mixed = 0;
  int64_t most = 0;
  for (const auto& [n_tokens, n_generating] : rec->batches) {
    if (n_generating == 0) continue;
    EXPECT_LE(n_tokens, n_ubatch) << "a step with a generating slot carried more than n_ubatch tokens";
    if (prompt_chunk > 0) {
      EXPECT_LE(n_tokens - n_generating, prompt_chunk) << "a step beside a generating slot took more prompt tokens";
    }
    if (budget_ms > 0) {
      EXPECT_LE(n_tokens - n_generating, int64_t(budget_ms) - 10)
          << "a step beside a generating slot overran the budget";
    }
    most = std::max(most, n_tokens - n_generating);
    mixed += n_tokens > n_generating;
  }
  EXPECT_GE(mixed, 3) << "the long prompt was not read alongside the generating slot over several steps";
  if (budget_ms > 0) {
    EXPECT_GE(most, int64_t(budget_ms) - 40) << "the budget's chunk stayed far below what fits it";
  }
}

TEST(ServerBatching, PromptChunksYieldToDecodingSlots) { batching_check_mixed_steps(16, 0); }

// --prompt-chunk: at most that many prompt tokens in a step beside a generating slot (fewer than -ub allows).
TEST(ServerBatching, PromptChunkBoundsPromptTokensBesideDecoding) { batching_check_mixed_steps(16, 5); }

// --step-budget-ms: beside a generating slot, the prompt tokens that fit the budget by the measured costs (here
// a cost model: 10 ms a step + 1 ms a prompt token, so 110 ms leaves 100), under --prompt-chunk and -ub.
TEST(ServerBatching, StepBudgetBoundsPromptTokensBesideDecoding) { batching_check_mixed_steps(200, 256, 110); }

// Slots waiting for their prompts stretch the step budget (server/step_budget.h): beside one generating slot,
// three slots that wait for long prompts get their share of --prompt-chunk (256 * 3 / 4 = 192 tokens), more than
// the 100 a 110 ms budget alone leaves, as far as a step of kMaxStretch budgets (330 ms: 320 tokens) allows. The
// costs come from the step_cost_ms seam (10 ms a step + 1 ms a prompt token), so the decisions are the policy's,
// not the host's. The answers stay those of the requests alone.
TEST(ServerBatching, WaitingSlotsStretchTheStepBudget) {
  server::ServerOptions o = seam_budget_options(4);
  // Once armed, the first step with a generating slot waits (at most 30 s) until the three long requests are in
  // the server too, so they wait for their prompts together beside it.
  HeldSteps h;
  h.attach(o, 4);
  LocalServer s(o);
  h.self = &s;
  const std::string long_prompt = story_prompt(20);
  const std::string alone_long = completion(s, long_prompt, 4)["content"];  // also measures a prompt token's cost
  const std::string alone_short = completion(s, kPrompts[0], 120)["content"];
  {
    std::lock_guard<std::mutex> lk(h.rec->mu);
    h.rec->batches.clear();
  }

  h.armed = true;
  std::string together_short;
  std::thread generating([&] { together_short = completion(s, kPrompts[0], 120)["content"]; });
  ASSERT_TRUE(wait_until([&] { return h.hold.load(); })) << "the first request never generated";
  std::string together_long[3];
  std::vector<std::thread> readers;
  for (auto& out : together_long)
    readers.emplace_back([&s, &out, &long_prompt] { out = completion(s, long_prompt, 4)["content"]; });
  for (auto& t : readers) t.join();
  generating.join();
  for (const auto& out : together_long) EXPECT_EQ(out, alone_long);
  EXPECT_EQ(together_short, alone_short);

  std::lock_guard<std::mutex> lk(h.rec->mu);
  int64_t most = 0;
  for (const auto& [n_tokens, n_generating] : h.rec->batches) {
    if (n_generating == 0) continue;
    EXPECT_LE(n_tokens, 512) << "a step with a generating slot carried more than n_ubatch tokens";
    EXPECT_LE(n_tokens - n_generating, 256 * 3 / 4) << "more than the waiting slots' share of --prompt-chunk";
    most = std::max(most, n_tokens - n_generating);
  }
  EXPECT_GT(most, 100) << "waiting slots did not stretch the step beyond the budget's 100 prompt tokens";
  EXPECT_EQ(most, 256 * 3 / 4) << "three waiting beside one generating: their share of the chunk";
}

// A short prompt that fits what a step has left goes before an older long one (docs/server.md, "Under load"):
// beside a generating slot, a long prompt (~300 tokens) and then a short one wait; the step's allowance (the
// step_cost_ms seam: 10 ms a step, 1 ms a prompt token, 110 ms budget, stretched to the waiting slots' share,
// 170 tokens) holds the short prompt's rest and part of the long one, so the short request generates from the
// next step on while the long prompt is still read. Oldest first, the short one waited for the long one.
TEST(ServerBatching, ShortPromptGoesBeforeAnOlderLongOne) {
  server::ServerOptions o = seam_budget_options(3);
  o.copy_prefixes = false;  // each prompt read whole (completion() also sends cache_prompt false)
  HeldSteps h;
  h.attach(o, 3);
  LocalServer s(o);
  h.self = &s;
  const std::string long_prompt = story_prompt(20);
  const std::string alone_long = completion(s, long_prompt, 4)["content"];  // also measures a prompt token's cost
  const std::string alone_short = completion(s, kPrompts[1], 8)["content"];
  {
    std::lock_guard<std::mutex> lk(h.rec->mu);
    h.rec->batches.clear();
  }
  h.armed = true;
  std::thread generating([&] { completion(s, kPrompts[0], 120); });
  ASSERT_TRUE(wait_until([&] { return h.hold.load(); })) << "the first request never generated";
  std::string got_long, got_short;
  std::thread older([&] { got_long = completion(s, long_prompt, 4)["content"]; });
  EXPECT_TRUE(wait_until([&] { return s.server().in_flight() >= 2; })) << "the long request never arrived";
  std::thread newer([&] { got_short = completion(s, kPrompts[1], 8)["content"]; });
  older.join();
  newer.join();
  generating.join();
  EXPECT_EQ(got_long, alone_long);
  EXPECT_EQ(got_short, alone_short);

  // The first step with prompt tokens beside the generating slot read the short prompt whole: the next one has
  // two generating slots and still carries the long prompt's rest.
  std::lock_guard<std::mutex> lk(h.rec->mu);
  size_t first = 0;
  while (first < h.rec->batches.size() &&
         !(h.rec->batches[first].second > 0 && h.rec->batches[first].first > h.rec->batches[first].second))
    ++first;
  ASSERT_LT(first + 1, h.rec->batches.size()) << "no step read prompts beside the generating slot";
  const auto [n_tokens, n_generating] = h.rec->batches[first + 1];
  EXPECT_EQ(n_generating, 2) << "the short prompt did not generate from the step after its prompt";
  EXPECT_GT(n_tokens, n_generating) << "the long prompt was read whole in one step: the test shows nothing";
}

// Shared prefixes: a request whose prompt starts like another slot's cached tokens (a common system prompt)
// gets those K/V cells copied into its own slot instead of computing them again, and answers as a cold run.
json batching_native(LocalServer& s, const std::string& prompt, int n, bool cache) {
  auto r = s.post("/completion", {{"prompt", prompt}, {"n_predict", n}, {"temperature", 0}, {"cache_prompt", cache}});
  EXPECT_TRUE(r);
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// --step-log FILE: a header, then one line per step with what it carried: here a prompt step (the prompt's
// tokens, no generating row), then decode steps of one row each.
TEST(ServerBatching, StepLogWritesOneLinePerStep) {
  const std::string path = ::testing::TempDir() + "opal_step_log_test.tsv";
  std::remove(path.c_str());
  int64_t n_prompt = 0;
  {
    server::ServerOptions o = default_options(2, 2048);
    o.step_log = path;
    LocalServer s(o);
    n_prompt = batching_native(s, kPrompts[3], 6, false)["timings"]["prompt_n"].get<int64_t>();
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no step log at " << path;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("t_s\tstep_ms\tdecode_rows\tprompt_tokens\tprompt_slots\tslots_waiting\tqueued\tchunk", 0), 0u)
      << line;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '\t');) f.push_back(x);
    ASSERT_EQ(f.size(), 10u) << line;
    rows.push_back(f);
  }
  std::remove(path.c_str());
  ASSERT_EQ(rows.size(), 6u) << "a prompt step and five decode steps for six tokens";
  EXPECT_EQ(rows[0][2], "0");
  EXPECT_EQ(rows[0][3], std::to_string(n_prompt));
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][2], "1") << "step " << i << ": one generating row";
    EXPECT_EQ(rows[i][3], "0") << "step " << i << ": no prompt token";
  }
}

void batching_check_prefix_copy(bool copy) {
  server::ServerOptions o = default_options(2, 2048);
  o.copy_prefixes = copy;
  LocalServer s(o);
  const std::string system = "Lily had a big red ball and she liked to play with it in the park every day. ";
  const std::string a = system + "One day";
  const std::string b = system + "The dog ran to the";
  // The system prompt alone lands in slot 0 (both are idle and unused).
  const int64_t n_system = batching_native(s, system, 1, false)["timings"]["prompt_n"].get<int64_t>();
  ASSERT_GT(n_system, 10);
  // a reuses slot 0 and fills it with the system prompt and 100 generated tokens, so b then shares under half
  // of that slot's cache (-sps 0.5) and goes to the other, empty slot.
  const json first = batching_native(s, a, 100, true);
  ASSERT_GT(first["timings"]["cache_n"].get<int64_t>(), n_system / 2) << "a did not reuse slot 0";
  const json second = batching_native(s, b, 16, true);
  const int64_t cached = second["timings"]["cache_n"].get<int64_t>();
  const int64_t evaluated = second["timings"]["prompt_n"].get<int64_t>();
  // Cold (cache_prompt false: the whole prompt evaluated, in the least recently used slot 0).
  const json cold = batching_native(s, b, 16, false);
  const int64_t n_b = cold["timings"]["prompt_n"].get<int64_t>();
  EXPECT_EQ(second["content"], cold["content"]);
  EXPECT_EQ(cached + evaluated, n_b);
  if (copy) {
    EXPECT_GE(cached, n_system - 2) << "the shared system prompt was computed again";
    EXPECT_LE(evaluated, n_b - n_system + 2);
  } else {
    EXPECT_EQ(cached, 0) << "b's slot held nothing of its prompt";
  }
}

TEST(ServerBatching, SharedPrefixIsCopiedFromAnotherSlot) { batching_check_prefix_copy(true); }
TEST(ServerBatching, SharedPrefixRecomputedWithoutPrefixCopy) { batching_check_prefix_copy(false); }

// Requests that start in the same step with the same system prompt: one computes it, the others wait for it and
// copy its K/V cells (the prefix is evaluated once), and each answers as a cold run. Without prefix copying,
// each computes it.
void batching_check_start_together(bool copy) {
  server::ServerOptions o = default_options(3, 3 * 1024);
  o.copy_prefixes = copy;
  struct TogetherRecord {
    std::mutex mu;
    int64_t prompt_tokens = 0;  // prompt tokens in the batches (generating slots' rows left out)
  };
  auto rec = std::make_shared<TogetherRecord>();
  o.on_batch = [rec](int64_t n_tokens, int64_t n_generating) {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->prompt_tokens += n_tokens - n_generating;
  };
  // Gate: the first request's decode waits (at most 60 s) until three requests are in the server, so the two
  // that follow are queued together and join in the same step.
  std::atomic<bool> hold{false};
  std::atomic<LocalServer*> self{nullptr};
  hold_decode_until_in_flight(o, hold, self, 3, 60);
  LocalServer s(o);
  self = &s;
  const std::string system =
      "Lily had a big red ball and she liked to play with it in the park every day. "
      "Her dog Max ran after the ball and brought it back to her. ";
  const std::string a = system + "One day";
  const std::string b = system + "The dog ran to the";

  hold = true;
  std::thread gate([&] { batching_native(s, "Tom", 1, false); });
  while (!hold.load() || s.server().in_flight() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  json together[2];
  std::thread ta([&] { together[0] = batching_native(s, a, 12, true); });
  std::thread tb([&] { together[1] = batching_native(s, b, 12, true); });
  ta.join();
  tb.join();
  gate.join();
  int64_t batched = 0;
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    batched = rec->prompt_tokens;
  }

  // Cold runs (cache_prompt false: every prompt token evaluated).
  const int64_t n_tokens_gate = batching_native(s, "Tom", 1, false)["timings"]["prompt_n"].get<int64_t>();
  const json cold_a = batching_native(s, a, 12, false);
  const json cold_b = batching_native(s, b, 12, false);
  const int64_t n_system = batching_native(s, system, 1, false)["timings"]["prompt_n"].get<int64_t>();
  const int64_t n_a = cold_a["timings"]["prompt_n"].get<int64_t>();
  const int64_t n_b = cold_b["timings"]["prompt_n"].get<int64_t>();
  ASSERT_GT(n_system, int64_t(server::kMinSharedWait) + 4);
  EXPECT_EQ(together[0]["content"], cold_a["content"]);
  EXPECT_EQ(together[1]["content"], cold_b["content"]);
  int64_t cached = 0, evaluated = 0;
  for (const json& j : together) {
    cached += j["timings"]["cache_n"].get<int64_t>();
    evaluated += j["timings"]["prompt_n"].get<int64_t>();
  }
  EXPECT_EQ(cached + evaluated, n_a + n_b);
  // The batches saw the gate's prompt and the two requests' evaluated tokens, nothing else.
  EXPECT_EQ(batched, n_tokens_gate + evaluated);
  if (copy) {
    EXPECT_GE(cached, n_system - 2) << "the shared system prompt was computed by both requests";
    EXPECT_LE(evaluated, n_a + n_b - n_system + 2);
  } else {
    EXPECT_LE(cached, 2) << "without prefix copying each request computes the system prompt";
  }
}

TEST(ServerBatching, SharedPrefixComputedOnceForRequestsStartingTogether) { batching_check_start_together(true); }
TEST(ServerBatching, SharedPrefixComputedByEachWithoutPrefixCopy) { batching_check_start_together(false); }

}  // namespace
}  // namespace opal::test
