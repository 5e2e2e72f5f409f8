// `opal serve [-m MODEL] [--host H] [--port P] [-np N] [-c N] [-b N] [-ub N] [-ctk T]
//  [-t N] [--backend NAME] [--perf-log FILE] [--api-key KEY] [--metrics] [-a ALIAS]
//  [--timeout S] [--http-threads N] [--max-connections N] [--header-timeout S] [--body-timeout S]
//  [--keep-alive-timeout S] [--max-body-size BYTES] [--drain-timeout S] [--no-webui] [--path DIR]`: the
// OpenAI / llama-server compatible HTTP server with its chat page at / (server/, docs/server.md); the context
// flags are every subcommand's (tools/context_options.h).
// SIGTERM or SIGINT stop it gracefully: no new requests, in-flight streams end
// with a final event, exit code 0. With --drain-timeout S, SIGTERM first drains
// (for a load balancer, deploy/): /health and new requests get 503 while the
// requests in flight run to their end, for at most S seconds; a second signal
// (or SIGINT) stops at once.
#include <fmt/format.h>
#include <malloc.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <thread>

#include "server/server.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/default_model.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"
#include "tools/spec_options.h"

namespace opal::tools {
namespace {

struct ServeOptions {
  server::ServerOptions server;
  ContextOptions context;  // -c (total, split over the slots) -b --ub --ctk -t
  BackendOptions backend;
  PerfOptions perf;
  SpecOptions spec;         // -md --spec-type --draft-max ... (per slot)
  int drain_timeout_s = 0;  // SIGTERM: seconds to let in-flight requests finish (0: stop at once)
};

// Waits for SIGTERM/SIGINT, drains when asked to, then stops the server.
void handle_signals(server::Server& srv, sigset_t set, int drain_timeout_s) {
  int sig = 0;
  sigwait(&set, &sig);
  if (sig == SIGTERM && drain_timeout_s > 0) {
    fmt::print(stderr, "serve: SIGTERM: draining ({} request(s) in flight, at most {} s)\n", srv.in_flight(),
               drain_timeout_s);
    srv.begin_drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain_timeout_s);
    const timespec tick{0, 100'000'000};
    while (srv.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      if (sigtimedwait(&set, nullptr, &tick) > 0) {
        fmt::print(stderr, "serve: second signal: stopping now\n");
        break;
      }
    }
    if (srv.in_flight() > 0) fmt::print(stderr, "serve: {} request(s) still in flight: ending them\n", srv.in_flight());
  }
  fmt::print(stderr, "serve: signal {}: finishing in-flight requests and stopping\n", sig);
  srv.shutdown();
}

// glibc's malloc raises its mmap threshold (to at most 32 MiB) after a large
// block is freed, and its trim threshold to twice that; a worker thread's arena
// then keeps up to 64 MiB of freed memory resident, which malloc_trim cannot
// return (it does not trim a thread arena's top). Every large request body
// handled on another worker thread left that much more: 50 MB bodies took RSS
// 30 -> 71 -> 107 -> 152 MB. Fixed thresholds keep it flat (docs/server.md).
void set_malloc_thresholds() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 4 << 20);  // blocks of 4 MiB and more: their own mapping, unmapped when freed
  mallopt(M_TRIM_THRESHOLD, 2 << 20);  // an arena's free top over 2 MiB goes back to the system
#endif
}

int run_serve(const ServeOptions& so) {
  set_malloc_thresholds();
  server::ServerOptions o = so.server;
  if (o.model.empty()) o.model = default_model_path();  // models/opal-kjv.gguf
  o.n_ctx = so.context.n_ctx;
  o.n_batch = so.context.n_batch;
  o.n_ubatch = so.context.n_ubatch;
  const ContextParams cp = so.context.params();  // checks --ctk, --ctv, --fa
  o.kv_type = cp.kv_type;
  o.kv_type_v = cp.kv_type_v;
  o.flash_attn = cp.flash_attn;
  o.threads = so.context.thread_count();
  o.backends = so.backend.backends;
  o.backend_tuning = so.backend.tuning();
  o.spec = so.spec.resolved();
  o.spec.lookup_write_back = false;  // -lcd: read by every slot, written by none (llama-server's behaviour)
  o.model_draft = so.spec.model_draft;
  o.draft_n_ctx = so.spec.draft.n_ctx;
  o.draft_threads = so.spec.draft.thread_count();
  if (!so.spec.draft.cache_type_k.empty()) o.draft_kv_type = parse_cache_type(so.spec.draft.cache_type_k, "-ctkd");
  if (!so.spec.draft.cache_type_v.empty()) o.draft_kv_type_v = parse_cache_type(so.spec.draft.cache_type_v, "-ctvd");
  o.draft_backends = so.spec.draft.devices;
  PerfSession perf(so.perf);
  o.hooks = perf.hooks();
  // Signals go to one waiting thread, not to whichever thread they hit.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::Server srv(o);
  const int port = srv.start();
  fmt::print(stderr, "serve: listening on http://{}:{} (loading {})\n", o.host, port, o.model);
  std::thread signals([&srv, set, drain = so.drain_timeout_s] { handle_signals(srv, set, drain); });
  signals.detach();  // lives until a signal or process exit
  try {
    srv.load();
  } catch (...) {
    srv.shutdown();
    srv.wait();
    throw;
  }
  warn_context_size(o.n_ctx, srv.model().hparams(), "serve");
  warn_slot_context(srv.n_ctx_slot() * o.n_parallel, o.n_parallel, srv.n_ctx_slot(), srv.model().hparams());
  fmt::print(stderr, "serve: ready: {} slot(s) on http://{}:{}\n", o.n_parallel, o.host, port);
  if (o.webui)
    fmt::print(stderr, "serve: chat page at http://{}:{}/{}\n", o.host, port,
               o.webui_path.empty() ? "" : " (from " + o.webui_path + ")");
  srv.wait();
  fmt::print(stderr, "serve: stopped\n");
  return perf.finish();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto so = std::make_shared<ServeOptions>();
  server::ServerOptions* o = &so->server;
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_options(sub, &o->model, &o->load, ModelDefault::BuiltIn);
  sub->add_option("--host", o->host, "bind address (127.0.0.1)");
  sub->add_option("--port", o->port, "listen port (8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  sub->add_option("--np,--parallel", o->n_parallel, "parallel slots (1); llama.cpp's -np")->check(at_least(1));
  sub->add_option("--sps,--slot-prompt-similarity", o->slot_prompt_similarity,
                  "reuse the idle slot with the longest common prefix only when it keeps more than this fraction of "
                  "that slot's cache, else the least recently used slot (0.5; 0 = any shared prefix)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--prompt-chunk", o->prompt_chunk,
                  "most prompt tokens a step takes while any slot is generating, within -ub (256; 0 = -ub); smaller: "
                  "shorter gaps in the streams, slower prompts under load")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--step-budget-ms", o->step_budget_ms,
                  "while slots generate, a step takes only the prompt tokens that fit a step of this many ms "
                  "(measured; at least 32, at most --prompt-chunk): the streams' gap (150; 0 = --prompt-chunk only)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag(
      "--no-prefix-copy", [o](int64_t) { o->copy_prefixes = false; },
      "compute a prompt's prefix again even when another slot holds its K/V (a shared system prompt)");
  sub->add_option("--step-log", o->step_log,
                  "write one tab-separated line per engine step to FILE: what it carried (generating rows, prompt "
                  "tokens, slots waiting for their prompt, queue) and what it took");
  add_engine_options(sub, so->context, so->backend, so->perf);
  CLI::Option* ctx_size = sub->get_option("--ctx-size");
  ctx_size->description(ctx_size->get_description() + "; the total, split evenly over the slots");
  sub->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (not for /health, /v1/models)");
  sub->add_option("-a,--alias", o->alias, "model id reported by /v1/models and in responses");
  sub->add_flag("--metrics", o->metrics, "enable GET /metrics (Prometheus text)");
  sub->add_option("--chat-template-file", o->chat_template_file, "Jinja chat template file (overrides the model's)");
  sub->add_flag(
      "--no-webui", [o](int64_t) { o->webui = false; }, "do not serve the chat page at /");
  sub->add_option("--path", o->webui_path, "serve the chat page's files from this directory (for working on it)");
  sub->add_option("--pooling", o->pooling,
                  "embeddings' pooling: none, mean, cls or last (default: the GGUF's pooling_type; absent: none)");
  sub->add_flag("--embedding,--embeddings", o->embeddings,
                "accepted for llama-server compatibility: every server answers /v1/embeddings beside chat");
  sub->add_option("--to,--timeout", o->timeout_s,
                  "write timeout in seconds: a client that stops reading a response is cut after it (600)")
      ->check(at_least(1));
  sub->add_option("--http-threads", o->http_threads,
                  "threads running request handlers (0 = max(64, 8 x slots)); connections cost none")
      ->check(at_least(0));
  sub->add_option("--max-connections", o->max_connections, "open connections; more get 503 (1024)");
  sub->add_option("--header-timeout", o->header_timeout_s, "seconds for a request's head to arrive (10)");
  sub->add_option("--body-timeout", o->body_timeout_s, "seconds for a request's body to arrive after its head (60)");
  sub->add_option("--keep-alive-timeout", o->idle_timeout_s, "seconds an idle keep-alive connection stays open (5)");
  sub->add_option("--max-body-size", o->max_body_bytes, "largest request body in bytes; larger get 413 (64 MiB)");
  sub->add_option("--drain-timeout", so->drain_timeout_s,
                  "on SIGTERM, answer /health and new requests with 503 and let in-flight requests finish for up to "
                  "this many seconds before stopping (0: stop at once; deploy/ behind a load balancer)")
      ->check(at_least(0));
  add_spec_options(sub, so->spec);
  set_action(sub, [so] { return run_serve(*so); });
}

}  // namespace opal::tools
