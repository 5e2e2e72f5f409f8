#include "server/slots.h"

#include "sampling/grammar.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/generation.h"

namespace opal::server {

const char* stop_type_name(StopType t) {
  switch (t) {
    case StopType::Eos: return "eos";
    case StopType::Limit: return "limit";
    case StopType::Word: return "word";
    case StopType::Abort: return "abort";
    case StopType::Cancelled: return "cancelled";
    case StopType::Grammar: return "grammar";
    case StopType::None: break;
  }
  return "none";
}

bool Task::pop(Event& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
  out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void Task::push(Event e) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

void Task::set_notify(std::function<void()> f) {
  std::lock_guard<std::mutex> lk(mu_);
  notify_ = std::move(f);
}

struct SlotEngine::Slot {
  Slot(Context& ctx, int i) : id(i), seq(ctx, i) {}
  int id = 0;
  std::shared_ptr<Task> task;  // null: idle
  // The tokens whose K/V sit in sequence `id` (runtime/generation.h): the
  // prompt is read while seq.size() < prompt.size(); then one token per step.
  Sequence seq;
  StopRules rules;  // the request's stop rules (stop strings are checked here)
  std::optional<Sampler> sampler;
  int32_t pending = -1;               // sampled token whose K/V is not computed yet
  std::unique_ptr<Speculation> spec;  // null: no speculative decoding
  std::vector<int32_t> draft;         // the draft after `pending` in this step's batch
  std::string generated;
  size_t sent = 0;  // bytes of `generated` already released
  int64_t n_decoded = 0;
  Timings timings;
  Clock::time_point t_assigned, t_prompt_done, t_last, t_used;
  // Waiting for slot `donor` (while it serves `donor_task`) to compute the first donor_n prompt tokens
  // this request shares with it, to copy them (requests that start together: SlotEngine::assign).
  Slot* donor = nullptr;
  std::weak_ptr<Task> donor_task;
  size_t donor_n = 0;
};

namespace {

// Bytes at the end of `s` that start a UTF-8 character whose remaining bytes
// have not arrived yet.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest suffix of `text` that is a proper prefix of a stop string.
size_t partial_stop_tail(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& w : stops) {
    if (w.empty()) continue;
    for (size_t len = std::min(w.size() - 1, text.size()); len > best; --len)
      if (text.compare(text.size() - len, len, w, 0, len) == 0) {
        best = len;
        break;
      }
  }
  return best;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

SlotEngine::SlotEngine(Context& ctx, const Vocab& vocab, Metrics& metrics, EngineOptions opts)
    : ctx_(ctx), vocab_(vocab), metrics_(metrics), opts_(opts) {
  if (opts_.n_slots < 1) fail("the number of slots (-np) must be at least 1, got {}", opts_.n_slots);
  if (opts_.n_ctx_slot < 2) fail("each slot needs a context of at least 2 tokens, got {}", opts_.n_ctx_slot);
  if (opts_.spec.type != SpecType::None) check_speculation_supported(ctx_, "target");
  for (int i = 0; i < opts_.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>(ctx_, i));
    slots_.back()->spec = make_speculation(opts_.spec, opts_.draft_ctx, i, ctx_.n_vocab());
  }
  if (vocab_.type() != VocabType::Wpm) {
    size_t max_token_bytes = 4;  // an unknown character: one token for up to 4 bytes
    for (int32_t t = 0; t < vocab_.n_tokens(); ++t)
      max_token_bytes = std::max(max_token_bytes, vocab_.token_to_piece(t, true).size());
    max_prompt_bytes_ = size_t(opts_.n_ctx_slot) * max_token_bytes;
  }
  if (!opts_.step_log.empty()) {
    step_log_ = std::fopen(opts_.step_log.c_str(), "w");
    if (!step_log_) fail("--step-log: cannot write {}", opts_.step_log);
    std::setvbuf(step_log_, nullptr, _IOLBF, 0);  // whole lines, readable while the server runs
    fmt::print(step_log_,
               "t_s\tstep_ms\tdecode_rows\tprompt_tokens\tprompt_slots\tslots_waiting\tqueued\tchunk\test_decode_"
               "ms\test_token_ms\n");
  }
  thread_ = std::thread([this] { loop(); });
}

SlotEngine::~SlotEngine() {
  shutdown();
  if (step_log_) std::fclose(step_log_);
}

std::shared_ptr<Task> SlotEngine::submit(GenParams params) {
  if (params.prompt.empty() || int64_t(params.prompt.size()) >= opts_.n_ctx_slot)
    fail("the prompt has {} tokens; a slot holds {}", params.prompt.size(), opts_.n_ctx_slot);
  auto task = std::make_shared<Task>(std::move(params));
  // Sampler setup costs O(n_vocab + prompt): done here, not on the engine thread.
  task->sampler.emplace(task->params.sampling, int32_t(ctx_.n_vocab()));
  for (int32_t t : task->params.prompt) task->sampler->accept(t);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return nullptr;
    queue_.push_back(task);
  }
  cv_.notify_all();
  return task;
}

struct SlotEngine::Job {
  std::function<void()> fn;
  std::exception_ptr error;
  bool done = false;
};

void SlotEngine::run_on_engine(std::function<void()> job) {
  auto j = std::make_shared<Job>();
  j->fn = std::move(job);
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_) fail("the server is shutting down");
  jobs_.push_back(j);
  cv_.notify_all();
  cv_.wait(lk, [&] { return j->done; });
  if (j->error) std::rethrow_exception(j->error);
}

void SlotEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlotEngine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !jobs_.empty() || n_busy_.load() > 0; });
      while (!jobs_.empty()) {  // between steps: the devices are free
        std::shared_ptr<Job> j = std::move(jobs_.front());
        jobs_.pop_front();
        if (stopping_) {
          j->error = std::make_exception_ptr(Error("the server is shutting down"));
        } else {
          lk.unlock();
          try {
            j->fn();
          } catch (...) {
            j->error = std::current_exception();
          }
          lk.lock();
        }
        j->done = true;
        cv_.notify_all();
      }
      if (!stopping_ && queue_.empty() && n_busy_.load() == 0) continue;
      if (stopping_) {
        for (auto& s : slots_)
          if (s->task) {  // release held-back text; finish() below sends the Done
            Event ev;
            release_text(*s, ev, true);
            if (!ev.text.empty()) s->task->push(std::move(ev));
          }
        for (auto& t : queue_) {  // never started: an error, not an empty answer
          Event ev;
          ev.kind = Event::Kind::Error;
          ev.error = "the server is shutting down; the request was not started";
          ev.error_status = 503;
          ev.n_prompt = int64_t(t->params.prompt.size());
          t->push(std::move(ev));
        }
        queue_.clear();
        lk.unlock();
        for (auto& s : slots_)
          if (s->task) finish(*s, StopType::Abort);
        metrics_.set_processing(0, 0);
        return;
      }
    }
    try {
      step();
    } catch (const std::exception& e) {  // never let the engine thread die: fail the running requests
      fail_running(e.what());
    }
  }
}

void SlotEngine::fail_running(const std::string& error) {
  const auto now = Clock::now();
  for (auto& s : slots_) {
    if (!s->task) continue;
    Event ev = ending(*s, Event::Kind::Error, now);
    ev.error = error;
    if (s->n_decoded > 0) metrics_.add_predicted(s->n_decoded, ev.timings.predicted_ms / 1000.0);
    s->task->push(std::move(ev));
    s->task.reset();
    s->pending = -1;
    s->donor = nullptr;
    s->seq.clear();
    --n_busy_;
  }
}

void SlotEngine::assign(std::shared_ptr<Task> task) {
  const GenParams& p = task->params;
  // The idle slot whose cache this prompt reuses most, if it keeps enough of that
  // cache; else the least recently used idle slot.
  Slot* best = nullptr;
  Slot* lru = nullptr;
  size_t best_lcp = 0;
  for (auto& s : slots_) {
    if (s->task) continue;
    if (!lru || s->t_used < lru->t_used) lru = s.get();
    if (!p.cache_prompt) continue;
    const size_t lcp = common_prefix(s->seq.tokens(), p.prompt);
    const bool similar = double(lcp) > double(opts_.prompt_similarity) * double(s->seq.tokens().size());
    if (lcp > 0 && similar && lcp > best_lcp) {
      best = s.get();
      best_lcp = lcp;
    }
  }
  Slot& s = best ? *best : *lru;
  const auto now = Clock::now();
  s.donor = nullptr;
  s.sampler = std::move(task->sampler);  // built by submit()
  // Prefix reuse: keep the common prefix, but always evaluate at least the last prompt token (its logits).
  size_t keep = 0;
  if (p.cache_prompt) keep = s.seq.reuse_prefix(p.prompt);
  else s.seq.truncate(0);
  // Shared prefix: another slot holding more of the prompt (the same system prompt) lends its cells.
  if (p.cache_prompt && opts_.copy_prefixes) {
    const Slot* donor = nullptr;
    size_t donor_n = keep;
    for (const auto& o : slots_) {
      if (o.get() == &s) continue;
      const size_t n = std::min(common_prefix(o->seq.tokens(), p.prompt), p.prompt.size() - 1);
      if (n > donor_n) {
        donor = o.get();
        donor_n = n;
      }
    }
    if (donor) {
      s.seq.copy_prefix(donor->seq, donor_n);
      keep = size_t(s.seq.size());  // the copy, or (no room) nothing, or (refused) the slot's own prefix
    }
    // A slot still reading a prompt that shares more with this one (requests arriving together with the same
    // system prompt): wait for it to compute that part, then copy it (resolve_shared_wait), rather than
    // computing it twice in the same steps.
    Slot* reader = nullptr;
    size_t reader_n = keep + kMinSharedWait - 1;
    for (const auto& o : slots_) {
      if (o.get() == &s || !o->task || o->donor || o->seq.size() >= int64_t(o->task->params.prompt.size())) continue;
      const size_t n = std::min(common_prefix(o->task->params.prompt, p.prompt), p.prompt.size() - 1);
      if (n > reader_n && n > size_t(o->seq.size())) {
        reader = o.get();
        reader_n = n;
      }
    }
    if (reader && !ctx_.recurrent()) {  // a recurrent state is not per position: nothing to copy
      s.donor = reader;
      s.donor_task = reader->task;
      s.donor_n = reader_n;
    }
  }
  // The slot keeps one cell free: a token that would fill it ends the request.
  s.rules.n_predict = p.n_predict;
  s.rules.n_ctx = opts_.n_ctx_slot - 1;
  s.rules.ignore_eog = p.ignore_eos;
  s.task = std::move(task);
  s.pending = -1;
  s.draft.clear();
  s.generated.clear();
  s.sent = 0;
  s.n_decoded = 0;
  s.timings = {};
  s.timings.cache_n = int64_t(keep);
  s.t_assigned = s.t_used = now;
  ++n_busy_;
  metrics_.observe_queue_wait(seconds(now - s.task->arrival));
}

void SlotEngine::release_text(Slot& s, Event& ev, bool final) {
  size_t end = s.generated.size();
  if (!final) {
    const size_t hold =
        std::max(partial_stop_tail(s.generated, s.task->params.stop), incomplete_utf8_tail(s.generated));
    end = end - std::min(end - s.sent, hold);
  }
  if (end > s.sent) ev.text += s.generated.substr(s.sent, end - s.sent);
  s.sent = std::max(s.sent, end);
}

Event SlotEngine::ending(Slot& s, Event::Kind kind, Clock::time_point now) {
  Event ev;
  ev.kind = kind;
  ev.n_prompt = int64_t(s.task->params.prompt.size());
  ev.n_past = s.seq.size();
  ev.slot = s.id;
  s.timings.predicted_n = s.n_decoded;
  if (s.n_decoded > 0) s.timings.predicted_ms = millis(now - s.t_prompt_done);
  ev.timings = s.timings;
  return ev;
}

void SlotEngine::drop_cancelled(Slot& s) {
  const auto now = Clock::now();
  Event ev = ending(s, Event::Kind::Done, now);
  ev.stop_type = StopType::Cancelled;
  metrics_.add_request_cancelled();
  if (s.n_decoded > 0) metrics_.add_predicted(s.n_decoded, ev.timings.predicted_ms / 1000.0);
  std::shared_ptr<Task> task = std::move(s.task);
  s.pending = -1;
  s.t_used = now;
  --n_busy_;
  task->push(std::move(ev));  // a waiting non-streamed handler returns
}

void SlotEngine::finish(Slot& s, StopType why, const std::string& word, const std::string& error) {
  const auto now = Clock::now();
  Event ev = ending(s, Event::Kind::Done, now);
  ev.stop_type = why;
  ev.error = error;
  ev.stopping_word = word;
  ev.cancelled = why == StopType::Abort;
  if (s.n_decoded > 0) metrics_.add_predicted(s.n_decoded, s.timings.predicted_ms / 1000.0);
  metrics_.observe_request(seconds(now - s.task->arrival));
  metrics_.add_request_finished();
  std::shared_ptr<Task> task = std::move(s.task);
  s.pending = -1;
  s.t_used = now;
  --n_busy_;
  int deferred = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    deferred = int(queue_.size());
  }
  metrics_.set_processing(n_busy_.load(), deferred);  // before the client can see the end
  task->push(std::move(ev));
  if (opts_.after_finish) opts_.after_finish();
}

void SlotEngine::step() {
  struct UpdateGauges {  // requests_processing / requests_deferred as this step leaves them
    SlotEngine& e;
    ~UpdateGauges() {
      int deferred = 0;
      {
        std::lock_guard<std::mutex> lk(e.mu_);
        deferred = int(e.queue_.size());
      }
      e.metrics_.set_processing(e.n_busy_.load(), deferred);
    }
  } update_gauges{*this};
  // 1. Cancelled requests free their slot at once (the cached K/V stays for reuse).
  for (auto& s : slots_)
    if (s->task && s->task->cancelled()) drop_cancelled(*s);
  // 2. Queued requests join between steps.
  int deferred = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!queue_.empty() && n_busy_.load() < opts_.n_slots) {
      std::shared_ptr<Task> t = std::move(queue_.front());
      queue_.pop_front();
      if (t->cancelled()) {  // gone before it started: nothing used but the prompt's tokenization
        metrics_.add_request_cancelled();
        Event ev;
        ev.kind = Event::Kind::Done;
        ev.stop_type = StopType::Cancelled;
        ev.n_prompt = int64_t(t->params.prompt.size());
        t->push(std::move(ev));
      } else {
        assign(std::move(t));
      }
    }
    deferred = int(queue_.size());
  }
  metrics_.set_processing(n_busy_.load(), deferred);

  // 3. One batch for every active slot: generating slots first (1 token each), then prompt chunks.
  batch_.clear();
  std::vector<std::pair<Slot*, int64_t>> outputs;  // each slot with logits and its first logits row
  int64_t n_rows = 0;
  std::vector<Slot*> prompt_slots;
  const size_t n_batch = size_t(ctx_.params().n_batch);
  size_t n_generating = 0;
  for (auto& s : slots_) n_generating += s->task && s->pending >= 0;
  draft_all(int64_t(n_batch) - int64_t(n_generating));
  for (auto& s : slots_)
    if (s->task && s->pending >= 0) {
      s->seq.add(batch_, s->pending, true);
      for (int32_t d : s->draft) s->seq.add(batch_, d, true);
      s->pending = -1;
      outputs.emplace_back(s.get(), n_rows);
      n_rows += 1 + int64_t(s->draft.size());
    }
  const int64_t n_decode_rows = n_rows;
  // Decode priority: while slots generate, prompt chunks fill the batch only up to one ubatch, so each
  // generating slot's next token waits for one graph run, not for a whole n_batch of prompt (docs/server.md).
  // --prompt-chunk narrows that further: a step with n generating slots costs about the same as one with
  // none for small n (the weights are read once), while each prompt token adds compute, so the prompt share
  // sets the step's length, the streams' inter-token gap.
  const size_t n_ubatch = size_t(std::max<int64_t>(1, ctx_.params().n_ubatch));
  size_t budget = n_batch;
  int64_t chunk = -1;  // the step's prompt-token allowance (for the step log); -1: n_batch, no slot generating
  if (n_generating > 0) {
    budget = std::min(n_batch, n_ubatch);
    if (opts_.prompt_chunk > 0) budget = std::min(budget, batch_.size() + size_t(opts_.prompt_chunk));
    budget = std::max(budget, batch_.size());
    // The step budget: only the prompt tokens that fit a step of step_budget_ms beside these rows.
    const int64_t cap = int64_t(budget - batch_.size());
    // Slots idle until their prompt is read stretch it (server/step_budget.h).
    StepSlots load;
    load.generating = int64_t(n_generating);
    load.decode_rows = int64_t(batch_.size());
    for (auto& s : slots_) load.waiting += s->task && s->seq.size() < int64_t(s->task->params.prompt.size());
    chunk = budget_prompt_chunk(step_cost_, opts_.step_budget_ms, cap, kMinBudgetChunk, load);
    budget = batch_.size() + size_t(chunk);
  }
  // Oldest request first, so a prompt's wait does not depend on its slot's number; but a prompt whose rest
  // fits what the step has left goes first (docs/server.md, "Under load": a short prompt does not wait out
  // the long ones ahead of it; each jumps once a request, so an old long prompt is delayed by at most the
  // other slots' short rests).
  std::vector<Slot*> reading;
  for (auto& s : slots_)
    if (s->task && s->seq.size() < int64_t(s->task->params.prompt.size()) && (!s->donor || resolve_shared_wait(*s)))
      reading.push_back(s.get());
  std::stable_sort(reading.begin(), reading.end(),
                   [](const Slot* a, const Slot* b) { return a->task->arrival < b->task->arrival; });
  const auto rest = [](const Slot* s) { return size_t(int64_t(s->task->params.prompt.size()) - s->seq.size()); };
  const auto read_chunk = [&](Slot* s) {
    const auto& prompt = s->task->params.prompt;
    const size_t k = s->seq.add_prompt_chunk(batch_, prompt, budget - batch_.size());
    s->timings.prompt_n += int64_t(k);
    prompt_slots.push_back(s);
    if (s->seq.size() == int64_t(prompt.size())) outputs.emplace_back(s, n_rows++);
  };
  for (Slot* s : reading)
    if (batch_.size() < budget && rest(s) <= budget - batch_.size()) read_chunk(s);
  for (Slot* s : reading) {
    if (batch_.size() >= budget) break;
    if (rest(s) > 0) read_chunk(s);
  }
  if (batch_.size() == 0) return;
  int64_t n_waiting = 0;  // slots with a prompt still to read that got none of this step
  for (auto& s : slots_)
    n_waiting += s->task && s->seq.size() < int64_t(s->task->params.prompt.size()) &&
                 std::find(prompt_slots.begin(), prompt_slots.end(), s.get()) == prompt_slots.end();

  // 4. One forward pass for all of them.
  const auto t0 = Clock::now();
  try {
    if (opts_.on_batch) opts_.on_batch(int64_t(batch_.size()), int64_t(n_generating));
    if (opts_.before_decode) opts_.before_decode();
    ctx_.decode(batch_);
  } catch (const std::exception& e) {  // the cache is unchanged: forget what this batch added
    fail_running(e.what());
    return;
  }
  const auto t1 = Clock::now();
  // Busy slots in this decode: a slot whose prompt ends here is in both lists but counts once.
  metrics_.add_decode(int(n_generating + prompt_slots.size()));
  for (Slot* s : prompt_slots) {
    s->timings.prompt_ms += millis(t1 - t0);
    if (s->seq.size() == int64_t(s->task->params.prompt.size()))
      metrics_.add_prompt(s->timings.prompt_n, s->timings.prompt_ms / 1000.0);
  }

  // 5. Sample every slot that got logits; a slot's draft tokens are accepted while they equal what it samples.
  for (const auto& [slot, row0] : outputs) {
    Slot& s = *slot;
    const size_t k = s.draft.size();
    const int64_t base = s.seq.size() - int64_t(k);  // the tokens before the one row 0 follows, and that one
    size_t j = 0;
    // Drafts and accepted ones are counted (the slot's timings and /metrics alike) before the take_token()
    // that may end the request: its client may read /metrics as soon as it has the end.
    s.timings.draft_n += int64_t(k);
    if (k > 0) metrics_.add_draft(int64_t(k), 0);
    for (;; ++j) {
      // Row j follows the first base + j tokens (the draft tokens before it accepted); the cache keeps those.
      const bool going = take_token(s, ctx_.logits(row0 + int64_t(j)), base + int64_t(j));
      if (!going || j >= k || s.pending != s.draft[j]) break;
      ++s.timings.draft_n_accepted;
      metrics_.add_draft(0, 1);
    }
    if (k > 0 && s.seq.size() > base + int64_t(j)) s.seq.truncate(size_t(base + int64_t(j)));
    if (k > 0) s.spec->record(int64_t(k), int64_t(j));
    s.draft.clear();
  }
  // The step budget learns what this step cost: decode and sampling, the streams' gap.
  const int64_t n_prompt = int64_t(batch_.size()) - n_decode_rows;
  const double ms = opts_.step_cost_ms ? opts_.step_cost_ms(n_prompt, n_decode_rows) : millis(Clock::now() - t0);
  step_cost_.observe(n_prompt, n_decode_rows, ms);
  if (step_log_)
    fmt::print(step_log_, "{:.3f}\t{:.1f}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.1f}\t{:.2f}\n", seconds(t0 - t_start_), ms,
               n_decode_rows, n_prompt, prompt_slots.size(), n_waiting, deferred, chunk,
               step_cost_.decode_ms(n_decode_rows), step_cost_.ms_per_prompt_token());
}

bool SlotEngine::resolve_shared_wait(Slot& s) {
  const Slot& d = *s.donor;
  const std::vector<int32_t>& prompt = s.task->params.prompt;
  const std::shared_ptr<Task> t = s.donor_task.lock();
  const bool same = t && d.task == t;  // the donor still serves the request whose prompt was looked at
  const size_t have = std::min(common_prefix(d.seq.tokens(), prompt), prompt.size() - 1);
  if (same && have < s.donor_n && d.seq.size() < int64_t(d.task->params.prompt.size())) return false;
  // The donor holds the shared prefix now (or went on to other work): copy what it holds of it.
  s.donor = nullptr;
  s.donor_task.reset();
  if (have > size_t(s.seq.size())) {
    s.seq.copy_prefix(d.seq, have);
    s.timings.cache_n = s.seq.size();  // the copy, or (no room) nothing, or (refused) the slot's own prefix
  }
  return true;
}

void SlotEngine::draft_all(int64_t rows) {
  std::vector<Slot*> who;
  std::vector<Speculation*> specs;
  std::vector<std::vector<int32_t>> histories;
  std::vector<int64_t> rooms;
  for (auto& s : slots_) {
    if (!s->task || s->pending < 0 || !s->spec) continue;
    s->draft.clear();
    int64_t room = std::min(rows, s->rules.n_ctx - s->seq.size() - 1);
    if (s->rules.n_predict >= 0) room = std::min(room, s->rules.n_predict - s->n_decoded - 1);
    if (room <= 0) continue;
    rows -= std::min<int64_t>(room, s->spec->params().n_max);
    who.push_back(s.get());
    specs.push_back(s->spec.get());
    histories.push_back(s->seq.tokens());
    histories.back().push_back(s->pending);
    rooms.push_back(room);
  }
  if (who.empty()) return;
  const std::vector<std::span<const int32_t>> tokens(histories.begin(), histories.end());
  int64_t decodes = 0;
  std::vector<std::vector<int32_t>> drafts = Speculation::propose_together(specs, tokens, rooms, &decodes);
  for (size_t i = 0; i < who.size(); ++i) who[i]->draft = std::move(drafts[i]);
  if (decodes > 0) metrics_.add_draft_decodes(decodes);
}

bool SlotEngine::take_token(Slot& s, const float* logits, int64_t n_cached) {
  const GenParams& p = s.task->params;
  s.pending = -1;
  // Before the request ends, the slot's cache drops the draft tokens after the n_cached that count.
  const auto finish = [this, n_cached](Slot& slot, StopType why, const std::string& word = {},
                                       const std::string& error = {}) {
    if (slot.seq.size() > n_cached) slot.seq.truncate(size_t(n_cached));
    this->finish(slot, why, word, error);
  };
  if (s.rules.before_sample(s.n_decoded)) {  // n_predict = 0: prompt evaluation only
    s.t_prompt_done = Clock::now();
    finish(s, StopType::Limit);
    return false;
  }
  int32_t tok = 0;
  try {
    tok = s.sampler->sample(logits);
  } catch (const GrammarDeadEnd& e) {  // this request ends; the others go on
    if (s.n_decoded == 0) s.t_prompt_done = Clock::now();
    Event ev;
    release_text(s, ev, true);
    if (!ev.text.empty()) s.task->push(std::move(ev));
    finish(s, StopType::Grammar, {}, e.what());
    return false;
  }
  TokenOut out;
  out.id = tok;
  if (p.want_logprobs || p.n_probs > 0) out.logprob = s.sampler->chosen_logprob();
  if (p.n_probs > 0) out.top = s.sampler->top_probs(p.n_probs);
  s.sampler->accept(tok);
  const auto now = Clock::now();
  if (s.n_decoded == 0) {
    s.t_prompt_done = now;
    metrics_.observe_ttft(seconds(now - s.task->arrival));
  } else {
    metrics_.observe_inter_token(seconds(now - s.t_last));
  }
  s.t_last = now;
  ++s.n_decoded;

  if (s.rules.ends_generation(vocab_, tok)) {
    Event ev;
    release_text(s, ev, true);
    if (!ev.text.empty()) s.task->push(std::move(ev));
    finish(s, StopType::Eos);
    return false;
  }
  out.piece = vocab_.token_to_piece(tok, false);
  const size_t search_from = s.generated.size();
  s.generated += out.piece;
  Event ev;
  ev.tokens.push_back(std::move(out));
  // A stop string may start inside the text released before this token.
  size_t stop_at = std::string::npos;
  std::string word;
  for (const std::string& w : p.stop) {
    if (w.empty()) continue;
    const size_t from = search_from >= w.size() ? search_from - w.size() + 1 : 0;
    const size_t at = s.generated.find(w, from);
    if (at != std::string::npos && at < stop_at) {
      stop_at = at;
      word = w;
    }
  }
  if (stop_at != std::string::npos) {
    s.generated.resize(std::max(stop_at, s.sent));
    release_text(s, ev, true);
    s.task->push(std::move(ev));
    finish(s, StopType::Word, word);
    return false;
  }
  const bool limit = s.rules.after_token(s.n_decoded, n_cached).has_value();  // n_predict or a full slot
  release_text(s, ev, limit);
  s.task->push(std::move(ev));
  if (limit) {
    finish(s, StopType::Limit);
    return false;
  }
  s.pending = tok;
  return true;
}

}  // namespace opal::server
