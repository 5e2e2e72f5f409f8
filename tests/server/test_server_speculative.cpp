// Speculative decoding in the server's slots (docs/speculative.md): greedy
// answers equal a server without speculation (n-gram lookup; the model as its
// own draft, which accepts every draft token), streamed or not, several slots
// at once, stop strings inside a draft; llama-server's timings.draft_n /
// draft_n_accepted and the /metrics counters; recurrent targets and
// mismatched drafts refused at load.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "core/error.h"
#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

const char* kSpecPrompts[] = {"Once upon a time", "The dog ran to the", "Lily had a big red ball",
                              "One day, a little boy named Tom"};

json spec_completion(LocalServer& s, const std::string& prompt, int n, const json& extra = json::object()) {
  json body = {{"prompt", prompt}, {"n_predict", n}, {"temperature", 0}, {"ignore_eos", true}};
  body.update(extra);
  auto r = s.post("/completion", body);
  EXPECT_TRUE(r);
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

server::ServerOptions with_spec(SpecType type, int n_parallel) {
  server::ServerOptions o = default_options(n_parallel, 1024 * n_parallel);
  o.spec.type = type;
  if (type == SpecType::Draft) {
    o.model_draft = stories_model();  // the target itself
    o.spec.p_min = 0;
  }
  return o;
}

TEST(ServerSpeculative, NgramAnswersEqualPlainOnesAcrossSlots) {
  std::vector<std::string> plain;
  {
    LocalServer s(default_options(2, 2048));
    for (const char* p : kSpecPrompts) plain.push_back(spec_completion(s, p, 120)["content"]);
  }
  LocalServer s(with_spec(SpecType::NgramSimple, 2));
  std::vector<json> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { got[size_t(i)] = spec_completion(s, kSpecPrompts[i], 120); });
  for (auto& t : threads) t.join();
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[size_t(i)]["content"], plain[size_t(i)]) << kSpecPrompts[i];
    EXPECT_EQ(got[size_t(i)]["tokens_predicted"], 120);
    const json& t = got[size_t(i)]["timings"];
    if (t.contains("draft_n")) {
      EXPECT_LE(t["draft_n_accepted"].get<int64_t>(), t["draft_n"].get<int64_t>());
      drafted += t["draft_n"].get<int64_t>();
      accepted += t["draft_n_accepted"].get<int64_t>();
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);
  const std::string m = s.get("/metrics")->body;
  EXPECT_EQ(metric_value(m, "opal:draft_tokens_total"), double(drafted));
  EXPECT_EQ(metric_value(m, "opal:draft_tokens_accepted_total"), double(accepted));
  // Streamed: the same text.
  const SseStream st = post_stream(
      "127.0.0.1", s.port(), "/v1/completions",
      {{"prompt", kSpecPrompts[0]}, {"max_tokens", 120}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_TRUE(st.well_formed) << st.error;
  EXPECT_EQ(chat_stream_text(st), plain[0]);
}

// /metrics counts a request's drafts before its client has the end: the engine is held right after the end went
// out (the after_finish seam) while the client reads /metrics, so a count left for later in that step (the
// last step's drafts were once added after the take_token() that ends the request) would read short here.
TEST(ServerSpeculative, MetricsCountTheLastStepsDraftsBeforeTheEnd) {
  // The model as its own draft accepts every draft token, so the last step carries drafts (the rest of the
  // request's tokens but one) and ends the request.
  server::ServerOptions o = with_spec(SpecType::Draft, 1);
  std::promise<void> read;
  std::shared_future<void> read_done = read.get_future().share();
  o.after_finish = [read_done] { read_done.wait_for(std::chrono::seconds(10)); };
  LocalServer s(o);
  const json got = spec_completion(s, kSpecPrompts[0], 120);
  const std::string m = s.get("/metrics")->body;
  read.set_value();
  const json& t = got["timings"];
  ASSERT_TRUE(t.contains("draft_n"));
  EXPECT_GT(t["draft_n_accepted"].get<int64_t>(), 0);
  EXPECT_EQ(metric_value(m, "opal:draft_tokens_total"), t["draft_n"].get<double>());
  EXPECT_EQ(metric_value(m, "opal:draft_tokens_accepted_total"), t["draft_n_accepted"].get<double>());
}

// llama.cpp's other draft-free modes in the slots: the same answers; ngram-mod's pool outlives a request.
TEST(ServerSpeculative, NgramMapAndModAnswersEqualPlainOnes) {
  std::vector<std::string> plain;
  {
    LocalServer s(default_options(1, 1024));
    for (int i = 0; i < 2; ++i) plain.push_back(spec_completion(s, kSpecPrompts[i], 100)["content"]);
  }
  for (SpecType type : {SpecType::NgramMapK4v, SpecType::NgramMod}) {
    SCOPED_TRACE(spec_type_name(type));
    server::ServerOptions o = with_spec(type, 1);
    o.spec.ngram_m = 4;
    LocalServer s(o);
    int64_t accepted = 0;
    for (int i = 0; i < 2; ++i) {
      const json got = spec_completion(s, kSpecPrompts[i], 100);
      EXPECT_EQ(got["content"], plain[size_t(i)]) << kSpecPrompts[i];
      accepted += got["timings"].value("draft_n_accepted", int64_t(0));
    }
    EXPECT_GT(accepted, 0);
  }
}

// -cd: a draft context of 48 cells drafts for the first 48 tokens of a sequence only, -td and -devd give the
// draft its own one-thread CPU registry; the answer is the plain one.
TEST(ServerSpeculative, DraftContextSizeAndThreadsTakeEffect) {
  const std::string plain = [] {
    LocalServer s(default_options(1, 1024));
    return spec_completion(s, kSpecPrompts[0], 100)["content"].get<std::string>();
  }();
  server::ServerOptions full = with_spec(SpecType::Draft, 1);
  server::ServerOptions small = full;
  small.draft_n_ctx = 48;
  small.draft_threads = 1;
  small.draft_backends = "none";
  small.draft_kv_type = DType::F32;  // -ctkd, -ctvd
  small.draft_kv_type_v = DType::BF16;
  int64_t n_full = 0, n_small = 0;
  {
    LocalServer s(full);
    const json got = spec_completion(s, kSpecPrompts[0], 100);
    EXPECT_EQ(got["content"], plain);
    n_full = got["timings"]["draft_n"].get<int64_t>();
  }
  {
    testing::internal::CaptureStderr();
    std::string log;
    {
      LocalServer s(small);
      const json got = spec_completion(s, kSpecPrompts[0], 100);
      log = testing::internal::GetCapturedStderr();
      EXPECT_EQ(got["content"], plain);
      n_small = got["timings"]["draft_n"].get<int64_t>();
      EXPECT_EQ(got["timings"]["draft_n_accepted"], got["timings"]["draft_n"]);
    }
    EXPECT_NE(log.find("serve: draft model: "), std::string::npos) << log;
    EXPECT_NE(log.find("(48 cells shared by the slots, K f32, V bf16)"), std::string::npos) << log;
  }
  EXPECT_GT(n_full, 50);
  EXPECT_GT(n_small, 0);
  EXPECT_LE(n_small, 48);  // drafts sit at positions below 48
}

TEST(ServerSpeculative, StopStringsAndLimitsInsideADraft) {
  LocalServer plain_s(default_options(1, 1024));
  LocalServer spec_s(with_spec(SpecType::NgramSimple, 1));
  for (int n : {1, 3, 45}) {
    const json a = spec_completion(plain_s, kSpecPrompts[2], n), b = spec_completion(spec_s, kSpecPrompts[2], n);
    EXPECT_EQ(b["content"], a["content"]) << n;
    EXPECT_EQ(b["tokens_predicted"], n);
  }
  // A stop word found after the first sentence: the same cut, the same word.
  const json full = spec_completion(plain_s, kSpecPrompts[2], 80);
  const std::string text = full["content"];
  const size_t dot = text.find(". ");
  ASSERT_NE(dot, std::string::npos) << text;
  const std::string word = text.substr(dot + 2, 4);
  const json extra = {{"stop", json::array({word})}};
  const json a = spec_completion(plain_s, kSpecPrompts[2], 80, extra),
             b = spec_completion(spec_s, kSpecPrompts[2], 80, extra);
  EXPECT_EQ(b["content"], a["content"]);
  EXPECT_EQ(b["stopping_word"], word);
  EXPECT_EQ(b["tokens_predicted"], a["tokens_predicted"]);
}

TEST(ServerSpeculative, TheModelAsItsOwnDraftAcceptsEveryDraftToken) {
  std::vector<std::string> plain;
  {
    LocalServer s(default_options(2, 2048));
    for (const char* p : kSpecPrompts) plain.push_back(spec_completion(s, p, 100)["content"]);
  }
  LocalServer s(with_spec(SpecType::Draft, 2));
  std::vector<json> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { got[size_t(i)] = spec_completion(s, kSpecPrompts[i], 100); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[size_t(i)]["content"], plain[size_t(i)]) << kSpecPrompts[i];
    const json& t = got[size_t(i)]["timings"];
    ASSERT_TRUE(t.contains("draft_n")) << t.dump();
    EXPECT_GT(t["draft_n"].get<int64_t>(), 50);
    EXPECT_EQ(t["draft_n_accepted"], t["draft_n"]);
  }
  // A follow-up on a slot's cached prefix keeps its draft in step.
  const json again = spec_completion(s, kSpecPrompts[0], 100);
  EXPECT_EQ(again["content"], plain[0]);
  EXPECT_EQ(again["timings"]["draft_n_accepted"], again["timings"]["draft_n"]);
}

// With a draft model the slots draft together: each draft position is one draft-model decode for every
// drafting slot (opal:draft_decodes_total), not one per slot, and the answers stay those of plain decoding.
TEST(ServerSpeculative, SlotsDraftTogetherInOneDraftBatchPerPosition) {
  for (int n_slots : {2, 4}) {
    std::vector<std::string> plain;
    {
      LocalServer s(default_options(n_slots, 1024 * n_slots));
      for (int i = 0; i < n_slots; ++i) plain.push_back(spec_completion(s, kSpecPrompts[i], 80)["content"]);
    }
    server::ServerOptions o = with_spec(SpecType::Draft, n_slots);
    o.spec.n_max = 6;
    LocalServer s(o);
    std::vector<json> got(static_cast<size_t>(n_slots));
    std::vector<std::thread> threads;
    for (int i = 0; i < n_slots; ++i)
      threads.emplace_back([&, i] { got[size_t(i)] = spec_completion(s, kSpecPrompts[i], 80); });
    for (auto& t : threads) t.join();
    int64_t drafted = 0;
    for (int i = 0; i < n_slots; ++i) {
      EXPECT_EQ(got[size_t(i)]["content"], plain[size_t(i)]) << n_slots << " slots: " << kSpecPrompts[i];
      drafted += got[size_t(i)]["timings"].value("draft_n", int64_t(0));
    }
    const std::string m = s.get("/metrics")->body;
    const double decodes = metric_value(m, "opal:draft_decodes_total");
    const double rounds = metric_value(m, "opal:draft_rounds_total");
    EXPECT_GT(drafted, 40 * n_slots) << n_slots << " slots";
    EXPECT_GT(rounds, 0);
    // A round is one catch-up decode and one per further draft position, whatever the number of slots.
    EXPECT_LE(decodes, rounds * o.spec.n_max) << n_slots << " slots";
    // Drafting one slot after the other takes exactly one decode per drafted token (p-min 0: a draft of k
    // tokens is a catch-up decode and k - 1 more); every round in which slots drafted together takes fewer.
    EXPECT_LT(decodes, double(drafted)) << n_slots << " slots: " << decodes << " decodes, " << drafted
                                        << " tokens drafted";
  }
}

TEST(ServerSpeculative, RefusedAtLoadWithTheReason) {
  auto load_error = [](server::ServerOptions o) -> std::string {
    server::Server srv(std::move(o));
    srv.start();
    try {
      srv.load();
    } catch (const Error& e) {
      srv.shutdown();
      srv.wait();
      return e.what();
    }
    srv.shutdown();
    srv.wait();
    return "";
  };
  server::ServerOptions bad_vocab = with_spec(SpecType::Draft, 1);
  bad_vocab.model_draft = shared_path("models/llama-2-tiny-random.gguf");
  EXPECT_NE(load_error(bad_vocab).find("vocabulary does not match"), std::string::npos);
  server::ServerOptions rwkv = with_spec(SpecType::NgramSimple, 1);
  rwkv.model = golden_model("tiny-rwkv7-q8_0");
  EXPECT_NE(load_error(rwkv).find("recurrent"), std::string::npos);
}

}  // namespace
}  // namespace opal::test
