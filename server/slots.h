// The slot scheduler: continuous batching over one Context.
//
// -np N slots share one KV cache; slot i owns sequence id i. One engine thread
// runs the loop
//   1. drop cancelled requests (their slot is free at once);
//   2. move queued requests into free slots, picking the free slot whose
//      cached tokens share the longest prefix with the prompt; that slot's
//      cells after the common prefix are removed and only the rest of the
//      prompt is evaluated (prefix reuse: runtime/generation.h's Sequence);
//      when another slot (busy or not) holds a longer prefix of the prompt
//      (a chat's system prompt), its K/V cells are copied instead;
//   3. build ONE batch: the last sampled token of every generating slot plus
//      prompt chunks of slots still reading their prompt, oldest request
//      first: up to n_batch tokens when no slot is generating, else at most
//      prompt_chunk prompt tokens within n_ubatch in all (decode priority: a
//      generating slot waits one short graph run per step, not n_batch /
//      n_ubatch of them, while a long prompt is read);
//      With speculative decoding a generating slot's token comes with a
//      draft of the tokens after it (runtime/speculative.h), each with logits;
//   4. decode it, sample each slot that got logits, and push events (text
//      pieces, then a final Done) onto that request's own queue. The stop
//      decisions are runtime/generation.h's StopRules (as in `opal run` and
//      `opal chat`), plus the request's stop strings. A slot's draft tokens are
//      accepted while they equal what its sampler takes; the rest leave its cache.
// Requests join between steps; a finished slot is free for the next step.
// Request threads only touch their Task (a mutex-protected event queue and a
// cancel flag), never the Context.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/context.h"
#include "runtime/speculative.h"
#include "sampling/sampler.h"
#include "server/metrics.h"
#include "server/step_budget.h"
#include "tokenizer/vocab.h"

namespace opal::server {

using Clock = std::chrono::steady_clock;

// Why a request ended. Abort: cut by shutdown (the client gets what was
// generated so far with finish_reason "abort", docs/server.md). Cancelled:
// the client went away (Task::cancel); the Done event still carries the usage.
// Grammar: the request's grammar had no way on (Done carries the message in `error`).
enum class StopType { None, Eos, Limit, Word, Abort, Cancelled, Grammar };
const char* stop_type_name(StopType t);

struct GenParams {
  std::vector<int32_t> prompt;
  SamplerParams sampling;
  int32_t n_predict = -1;         // -1: until end of generation or a full slot context
  std::vector<std::string> stop;  // stop strings (not included in the output)
  int n_probs = 0;                // top probabilities to report per token
  bool want_logprobs = false;     // report the chosen token's logprob
  bool cache_prompt = true;       // allow prefix reuse
  bool ignore_eos = false;
};

struct TokenOut {
  int32_t id = 0;
  std::string piece;
  float logprob = 0;
  std::vector<TokenProb> top;
};

struct Timings {
  int64_t cache_n = 0;   // prompt tokens reused from the slot's cache
  int64_t prompt_n = 0;  // prompt tokens evaluated
  double prompt_ms = 0;
  int64_t predicted_n = 0;  // tokens generated
  double predicted_ms = 0;
  int64_t draft_n = 0;           // speculative decoding: draft tokens verified
  int64_t draft_n_accepted = 0;  // of those, accepted
};

struct Event {
  enum class Kind { Tokens, Done, Error } kind = Kind::Tokens;
  std::string text;              // output text released by this event (stop-string safe)
  std::vector<TokenOut> tokens;  // tokens sampled for this event
  // Done and Error: what the request used (prompt tokens, tokens generated so far).
  // Done:
  StopType stop_type = StopType::None;
  std::string stopping_word;
  bool cancelled = false;  // ended by shutdown (stop_type Abort)
  int64_t n_prompt = 0, n_past = 0;
  int slot = -1;
  Timings timings;
  // Error: the message and the HTTP status to report (500: a failed decode;
  // 503: shutdown came before the request reached a slot). Done with
  // stop_type Grammar: why the grammar could not go on.
  std::string error;
  int error_status = 500;
};

// One request in flight: filled by the engine, drained by the HTTP thread.
class Task {
 public:
  explicit Task(GenParams p) : params(std::move(p)), arrival(Clock::now()) {}
  const GenParams params;
  const Clock::time_point arrival;
  // Built by SlotEngine::submit() on the caller's thread (logit_bias, penalties
  // over the prompt), so the engine thread only moves it into a slot.
  std::optional<Sampler> sampler;

  // Waits up to `timeout` for an event; false on timeout.
  bool pop(Event& out, std::chrono::milliseconds timeout);
  void push(Event e);
  // Called after every push (on the pushing thread, outside the lock), e.g.
  // to wake the HTTP layer's stream writer; null to stop. Events pushed
  // before it was set are not announced: pop them after setting it.
  void set_notify(std::function<void()> f);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> notify_;
};

struct EngineOptions {
  int n_slots = 1;
  int64_t n_ctx_slot = 0;  // context per slot (tokens)
  // A request goes to the idle slot sharing the longest prefix with it among those
  // whose cache would be kept by more than this fraction (llama-server's
  // --slot-prompt-similarity); otherwise to the least recently used idle slot, so
  // a short shared head (a chat template's first tokens) does not evict another
  // conversation's cache. 0: any shared prefix counts.
  float prompt_similarity = 0.5f;
  // Decode priority (docs/server.md, "Under load"): the most prompt tokens a step takes beside generating
  // slots (--prompt-chunk; within n_ubatch in all). 0: n_ubatch less the generating slots' rows.
  int64_t prompt_chunk = 256;
  // Per-step time budget (--step-budget-ms): while slots generate, the prompt tokens a step takes are further
  // narrowed to those that fit a step of this many milliseconds, by the measured cost of a decode step and of
  // a prompt token (server/step_budget.h); never below kMinBudgetChunk. 0: the fixed prompt_chunk only.
  double step_budget_ms = 150;
  // Shared prefixes: a request whose prompt shares a longer prefix with another slot's cached tokens than with
  // its own slot's gets those K/V cells copied (Sequence::copy_prefix) instead of computing them again.
  bool copy_prefixes = true;
  // Test seam: called on the engine thread before each batched decode; an
  // exception from it fails that decode as a failed Context::decode would.
  std::function<void()> before_decode;
  // Test seam: called on the engine thread with each batch's size and how many of its slots were generating
  // (one token each, plus drafts) before it is decoded.
  std::function<void(int64_t n_tokens, int64_t n_generating)> on_batch;
  // Test seam: when set, a step's cost as the step budget sees it (instead of its measured milliseconds), from
  // its prompt tokens and generating rows, so tests of the budget do not depend on the host's speed.
  std::function<double(int64_t n_prompt, int64_t n_decode)> step_cost_ms;
  // Test seam: called on the engine thread right after a finished request's end went to its client, so a test
  // can read /metrics there: every counter the request moved is counted before its client sees the end.
  std::function<void()> after_finish;
  // Speculative decoding (runtime/speculative.h), per slot: each generating
  // slot's next token goes into the batch with a draft of the tokens after it.
  // A draft model drafts in sequence i of draft_ctx for slot i (not owned).
  SpecParams spec;
  Context* draft_ctx = nullptr;
  // --step-log FILE: one tab-separated line per step (what it carried and what it cost; docs/server.md,
  // "Under load"). Empty: none.
  std::string step_log;
};

// The fewest prompt tokens a step beside generating slots takes under the step budget (fewer only when
// --prompt-chunk is smaller): prompts go on being read even when the decode part alone fills the budget.
constexpr int64_t kMinBudgetChunk = 32;
// A request starting in the same step as another one whose prompt shares a prefix with it (a system
// prompt) waits for that slot to compute the prefix and copies it, when the copy saves at least this many
// tokens; a shorter shared head is computed by both.
constexpr size_t kMinSharedWait = 16;

class SlotEngine {
 public:
  SlotEngine(Context& ctx, const Vocab& vocab, Metrics& metrics, EngineOptions opts);
  ~SlotEngine();
  SlotEngine(const SlotEngine&) = delete;
  SlotEngine& operator=(const SlotEngine&) = delete;

  // Queues a request; returns null once shutdown() began. The sampler is set
  // up here, on the caller's thread; throws opal::Error for invalid sampling
  // parameters or a prompt that does not fit a slot.
  std::shared_ptr<Task> submit(GenParams params);
  // Ends every queued and running request with a final Done event
  // (cancelled = true) and stops the engine thread. Idempotent.
  void shutdown();
  // Runs `job` on the engine thread between two steps (so it may use the model's devices, which run one
  // graph at a time: embeddings) and returns when it has run; its exception is rethrown here. Throws
  // opal::Error when shutdown() came first.
  void run_on_engine(std::function<void()> job);

  int n_slots() const { return opts_.n_slots; }
  int64_t n_ctx_slot() const { return opts_.n_ctx_slot; }
  int n_busy() const { return n_busy_.load(); }
  // The most prompt text (bytes) worth tokenizing: no token covers more than
  // max_token_bytes() bytes of text, so longer text cannot fit a slot's
  // context. SIZE_MAX when the vocabulary gives no such bound (WPM, whose
  // [UNK] may stand for a whole word).
  size_t max_prompt_bytes() const { return max_prompt_bytes_; }

 private:
  struct Slot;
  void loop();
  void assign(std::shared_ptr<Task> task);
  void finish(Slot& s, StopType why, const std::string& word = {}, const std::string& error = {});
  // The final event of a slot's request (kind Done or Error) with its usage and timings.
  Event ending(Slot& s, Event::Kind kind, Clock::time_point now);
  // Frees a slot whose client went away, ending its task with a Done (Cancelled) event.
  void drop_cancelled(Slot& s);
  void release_text(Slot& s, Event& ev, bool final);
  // Samples slot s's next token from `logits` (those after the first n_cached
  // tokens of its sequence) and streams it; false when that ended the request
  // (the sequence cut to n_cached, finish() called), else the token is in s.pending.
  bool take_token(Slot& s, const float* logits, int64_t n_cached);
  // Drafts the tokens after pending into draft for every generating slot that speculates, together (with a
  // draft model: one draft-model decode per draft position for all of them); `rows` is what the batch has
  // room for besides the slots' own tokens, given out in slot order, each draft also within its slot's
  // context and n_predict.
  void draft_all(int64_t rows);
  // A request waiting for another slot to compute the prefix they share: once that slot holds it (or stops
  // reading that prompt), copies what it holds and returns true (the request reads the rest of its
  // prompt); false while it should go on waiting.
  bool resolve_shared_wait(Slot& s);
  // Ends every running request with an Error event and forgets its slot's
  // cached tokens (a failed batch may have recorded tokens the cache lacks).
  void fail_running(const std::string& error);
  void step();

  Context& ctx_;
  Vocab vocab_;
  Metrics& metrics_;
  EngineOptions opts_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  struct Job;
  std::deque<std::shared_ptr<Job>> jobs_;  // run_on_engine() work, run before the next step
  bool stopping_ = false;
  std::atomic<int> n_busy_{0};
  std::thread thread_;
  Batch batch_;
  StepCost step_cost_;             // the step budget's estimates (engine thread only)
  std::FILE* step_log_ = nullptr;  // --step-log (engine thread only)
  Clock::time_point t_start_ = Clock::now();
  size_t max_prompt_bytes_ = SIZE_MAX;
};

}  // namespace opal::server
