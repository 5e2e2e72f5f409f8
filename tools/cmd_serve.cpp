// `opal serve [-m MODEL] [--host H] [--port P] [-np N] [-c N] [-t N] [--api-key KEY]
//  [--metrics] [-a ALIAS] [--timeout S]`: the OpenAI / llama-server compatible
// HTTP server (server/, docs/server.md). SIGTERM or SIGINT stop it gracefully:
// no new requests, in-flight streams end with a final event, exit code 0.
#include <fmt/format.h>

#include <csignal>
#include <thread>

#include "server/server.h"
#include "tools/load_options.h"
#include "tools/commands.h"
#include "tools/default_model.h"

namespace opal::tools {
namespace {

int run_serve(server::ServerOptions o) {
  if (o.model.empty()) o.model = default_model_path();  // models/opal-kjv.gguf
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
  std::thread signals([&srv, set] {
    int sig = 0;
    sigwait(&set, &sig);
    fmt::print(stderr, "serve: signal {}: finishing in-flight requests and stopping\n", sig);
    srv.shutdown();
  });
  signals.detach();  // lives until a signal or process exit
  try {
    srv.load();
  } catch (...) {
    srv.shutdown();
    srv.wait();
    throw;
  }
  fmt::print(stderr, "serve: ready: {} slot(s) on http://{}:{}\n", o.n_parallel, o.host, port);
  srv.wait();
  fmt::print(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<server::ServerOptions>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  sub->add_option("-m,--model", o->model, "GGUF model (default: models/opal-kjv.gguf, or $OPAL_DEFAULT_MODEL)");
  add_load_options(sub, &o->load);
  sub->add_option("--host", o->host, "bind address (127.0.0.1)");
  sub->add_option("--port", o->port, "listen port (8080; 0 = any free port)");
  sub->add_option("--np,--parallel", o->n_parallel, "parallel slots (1); llama.cpp's -np");
  sub->add_option("-c,--ctx-size", o->n_ctx, "total context, split over the slots (0 = the model's)");
  sub->add_option("-b,--batch-size", o->n_batch, "most tokens one batched decode takes (2048)");
  sub->add_option("--ub,--ubatch-size", o->n_ubatch, "physical batch size (512)");
  sub->add_option("-t,--threads", o->threads, "compute threads (default: all)");
  sub->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (not for /health, /v1/models)");
  sub->add_option("-a,--alias", o->alias, "model id reported by /v1/models and in responses");
  sub->add_flag("--metrics", o->metrics, "enable GET /metrics (Prometheus text)");
  sub->add_option("--to,--timeout", o->timeout_s, "socket read/write timeout in seconds (600)");
  sub->add_option("--http-threads", o->http_threads, "HTTP worker threads (0 = max(64, 8 x slots))");
  set_action(sub, [o] { return run_serve(*o); });
}

}  // namespace opal::tools
