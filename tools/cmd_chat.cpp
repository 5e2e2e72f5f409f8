// `opal chat [-m MODEL] [-sys TEXT] [-p TEXT] [--single-turn] [-n N] [-c N]
//  [-t N] [sampling...]`: a conversation in the terminal, like llama-cli's
// conversation mode. Each line on stdin is a user turn (end a line with `\`
// to continue it on the next); the model's reply streams to stdout.
//
// Every turn renders the whole conversation with the model's chat template
// (ChatML when the model has none, said once on stderr), tokenizes it, and
// evaluates only the tokens after the longest prefix already in the KV cache
// (runtime/generation.h: ChatState keeps the conversation's tokens).
// When the conversation outgrows the context, the oldest turns (never the
// system prompt) are dropped and the rest re-evaluated.
// Commands: /exit or /quit, /clear (forget the conversation), /help; any
// other line starting with `/` gets a help line instead of going to the model
// (`//text` sends `/text`).
// Ctrl-C (SIGINT) during a reply stops the reply: the part already printed
// stays in the conversation as the assistant's turn (as llama-cli keeps it).
// Ctrl-C while waiting for a message, a second Ctrl-C before the reply
// stopped, or Ctrl-D (end of input) exits with the summary line.
// Without -m the project's default model is used (models/opal-kjv.gguf: a
// base model whose template lets it continue the user's text).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "graph/registry.h"
#include "models/model.h"
#include "runtime/generation.h"
#include "tokenizer/jinja/chat.h"
#include "tokenizer/vocab.h"
#include "tools/backend_options.h"
#include "tools/commands.h"
#include "tools/context_options.h"
#include "tools/default_model.h"
#include "tools/load_options.h"
#include "tools/perf_options.h"
#include "tools/sampling_options.h"
#include "tools/spec_options.h"

namespace opal::tools {
namespace {

struct ChatOptions {
  LoadOptions load;  // --lm / --no-mmap / --mlock
  std::string model, system_prompt, prompt, template_file;
  bool single_turn = false, conversation = true, ignore_eos = false;
  int n_predict = -1;
  ContextOptions context;    // -c -b --ub --ctk -t
  SamplingOptions sampling;  // --temp --top-k ... --seed
  BackendOptions backend;
  PerfOptions perf;
  SpecOptions spec;  // -md --spec-type --draft-max ...
};

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

// SIGINTs not yet handled (the handler only counts them).
volatile sig_atomic_t g_interrupts = 0;

void on_sigint(int) { g_interrupts = g_interrupts + 1; }

// SIGINT counts into g_interrupts; without SA_RESTART, so that a read waiting
// for the next message is interrupted (and the chat ends).
void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot read chat template file '{}'", path);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

class ChatSession {
 public:
  ChatSession(const ChatOptions& o, Context& ctx, const Vocab& vocab, const gguf::File& file)
      : o_(o), ctx_(ctx), vocab_(vocab), state_(ctx, o.sampling.params(vocab)) {
    if (!o.template_file.empty()) {
      template_ = jinja::Template::parse(read_file(o.template_file));
    } else {
      const jinja::ModelChatTemplate t = jinja::chat_template_from_gguf(file);
      if (t.is_fallback) std::fprintf(stderr, "note: the model has no chat template; using ChatML\n");
      template_ = jinja::Template::parse(t.source);
    }
    const jinja::SpecialTokenTexts sp = jinja::special_tokens_from_gguf(file);
    vars_ = ordered_json::object();
    vars_["bos_token"] = sp.bos.value_or("");
    vars_["eos_token"] = sp.eos.value_or("");
    bos_text_ = sp.bos.value_or("");
    clear();
  }

  void clear() {
    messages_ = ordered_json::array();
    if (!o_.system_prompt.empty()) messages_.push_back({{"role", "system"}, {"content", o_.system_prompt}});
    state_.clear();
  }

  // One user turn: prints the reply. Returns false when the turn could not be
  // run (the message does not fit the context); the conversation is unchanged.
  bool turn(const std::string& user_text) {
    messages_.push_back({{"role", "user"}, {"content", user_text}});
    std::vector<int32_t> tokens = render();
    // Keep room for a reply: drop the oldest turns while the prompt takes more
    // than three quarters of the context.
    const int64_t budget = std::max<int64_t>(1, ctx_.n_ctx() * 3 / 4);
    while (int64_t(tokens.size()) > budget && drop_oldest_turn()) tokens = render();
    if (int64_t(tokens.size()) >= ctx_.n_ctx()) {
      messages_.erase(messages_.end() - 1);
      std::fprintf(stderr, "error: this message needs %zu tokens but the context holds only n_ctx = %lld (raise -c)\n",
                   tokens.size(), static_cast<long long>(ctx_.n_ctx()));
      return false;
    }
    evaluate(tokens);
    std::string reply = generate();
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
    return true;
  }

  // Speculative decoding for the replies (tools/spec_options.h); not owned.
  void set_speculation(Speculation* spec) { state_.set_speculation(spec); }

  void print_summary() const {
    std::fprintf(stderr, "\nprompt: %lld tokens in %.3f s (%.2f t/s) | generation: %lld tokens in %.3f s (%.2f t/s)\n",
                 static_cast<long long>(n_prompt_), prompt_s_, prompt_s_ > 0 ? double(n_prompt_) / prompt_s_ : 0.0,
                 static_cast<long long>(n_gen_), gen_s_, gen_s_ > 0 ? double(n_gen_) / gen_s_ : 0.0);
  }

 private:
  std::vector<int32_t> render() const {
    const std::string text = jinja::apply_chat_template(*template_, messages_, true, vars_);
    // The template writes BOS itself when it wants one; otherwise the
    // vocabulary's add_bos applies, as llama.cpp does.
    const bool has_bos = !bos_text_.empty() && text.rfind(bos_text_, 0) == 0;
    return vocab_.tokenize(text, !has_bos, true);
  }

  bool drop_oldest_turn() {
    size_t first = 0;
    while (first < messages_.size() && messages_[first]["role"] == "system") ++first;
    // Never drop the message being answered.
    if (first + 1 >= messages_.size()) return false;
    messages_.erase(messages_.begin() + std::ptrdiff_t(first));
    while (first + 1 < messages_.size() && messages_[first]["role"] == "assistant")
      messages_.erase(messages_.begin() + std::ptrdiff_t(first));
    return true;
  }

  void evaluate(const std::vector<int32_t>& tokens) {
    const auto t0 = Clock::now();
    n_prompt_ += state_.prompt(tokens);  // only what follows the cached prefix
    prompt_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  std::string generate() {
    const auto t0 = Clock::now();
    std::string reply;
    StopRules rules;
    rules.n_predict = o_.n_predict;
    rules.ignore_eog = o_.ignore_eos;
    const GenerateResult g = state_.reply(vocab_, rules, [&](int32_t, std::string_view piece) {
      if (g_interrupts > 0) return false;  // Ctrl-C: stop the reply (this piece is not shown)
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      reply += piece;
      return true;
    });
    if (g.reason == FinishReason::ContextFull)
      std::fprintf(stderr, "\n[context full: reply cut; older turns are dropped on the next message]");
    if (g.reason == FinishReason::Requested) {
      std::fflush(stdout);
      std::fprintf(stderr, "\n[reply stopped (Ctrl-C); it stays in the conversation. Ctrl-C again or Ctrl-D exits]");
      interrupted_ = true;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    gen_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
    n_gen_ += g.n_generated;
    return reply;
  }

 public:
  // Whether the last reply was stopped by Ctrl-C (cleared when read).
  bool take_interrupted() {
    const bool was = interrupted_;
    interrupted_ = false;
    return was;
  }

 private:
  const ChatOptions& o_;
  bool interrupted_ = false;
  Context& ctx_;
  const Vocab& vocab_;
  ChatState state_;  // the conversation's tokens in the cache (sequence 0) and the sampler
  std::optional<jinja::Template> template_;
  ordered_json vars_, messages_;
  std::string bos_text_;
  double prompt_s_ = 0, gen_s_ = 0;
  int64_t n_prompt_ = 0, n_gen_ = 0;
};

const char* const kChatHelp =
    "Commands: /exit, /quit: leave | /clear: forget the conversation | /help | //text sends /text | end a line "
    "with \\ to go on | Ctrl-C stops a reply, Ctrl-C at the prompt or Ctrl-D exits";

// Reads one user message; a line ending in `\` continues on the next line.
bool read_message(std::string& out, bool interactive) {
  out.clear();
  std::string line;
  if (interactive) std::fputs("> ", stdout), std::fflush(stdout);
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      out += line + "\n";
      continue;
    }
    out += line;
    return true;
  }
  return !out.empty();
}

int run_chat(const ChatOptions& o_in) {
  ChatOptions o = o_in;
  ContextParams cp = o.context.params();  // checks -ctk before loading
  fit_context_for_speculation(cp, o.spec.resolved());
  check_n_predict(o.n_predict);
  if (o.model.empty()) o.model = default_model_path();
  const int threads = o.context.thread_count();
  auto reg = o.backend.make_registry(threads);
  auto model = Model::load(o.model, *reg, o.load);
  warn_context_size(cp.n_ctx, model->hparams(), "chat");
  const Vocab vocab = Vocab::from_gguf(model->gguf());
  Context ctx(*model, cp);
  PerfSession perf(o.perf);
  ctx.set_hooks(perf.hooks());
  ChatSession chat(o, ctx, vocab, model->gguf());
  const Draft draft = make_draft(o.spec, *reg, o.backend, threads, o.load, vocab, ctx);
  chat.set_speculation(draft.spec.get());

  const bool interactive = isatty(STDIN_FILENO) && !o.single_turn;
  if (interactive)
    std::fprintf(stderr,
                 "opal chat: %s, n_ctx %lld. Type a message; /exit quits, /clear forgets, /help lists commands.\n",
                 o.model.c_str(), static_cast<long long>(ctx.n_ctx()));
  install_sigint_handler();
  int failures = 0;
  // After a reply: a Ctrl-C that stopped it is used up; one more while it was
  // stopping (a second Ctrl-C) ends the chat.
  auto after_reply = [&chat] {
    const bool stopped = chat.take_interrupted();
    const bool exit = g_interrupts > (stopped ? 1 : 0);
    g_interrupts = 0;
    return exit;
  };
  bool quit = false;
  if (!o.prompt.empty()) {
    if (interactive) std::printf("> %s\n", o.prompt.c_str());
    failures += !chat.turn(o.prompt);
    quit = after_reply();
  }
  if (!o.single_turn) {
    std::string msg;
    while (!quit && read_message(msg, interactive) && g_interrupts == 0) {
      if (msg == "/exit" || msg == "/quit") break;
      if (msg == "/clear") {
        chat.clear();
        std::fprintf(stderr, "[conversation cleared]\n");
        continue;
      }
      if (msg == "/help") {
        std::fprintf(stderr, "%s\n", kChatHelp);
        continue;
      }
      if (msg.rfind("//", 0) == 0) {
        msg.erase(0, 1);  // `//text` sends `/text`
      } else if (!msg.empty() && msg[0] == '/') {
        std::fprintf(stderr, "unknown command '%s' (not sent to the model). %s\n",
                     msg.substr(0, msg.find_first_of(" \n")).c_str(), kChatHelp);
        continue;
      }
      if (msg.empty()) continue;
      failures += !chat.turn(msg);
      quit = after_reply();
    }
  } else if (o.prompt.empty()) {
    fail("--single-turn needs a message: -p TEXT");
  }
  chat.print_summary();
  if (draft.spec) std::fprintf(stderr, "speculative: %s\n", spec_summary(*draft.spec).c_str());
  finish_draft(draft);
  const int perf_status = perf.finish();
  return failures ? 1 : perf_status;
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* sub = app.add_subcommand("chat", "Chat with a model in the terminal (stdin lines are user turns)");
  add_model_options(sub, &o->model, &o->load, ModelDefault::BuiltIn);
  sub->add_option("--sys,--system-prompt", o->system_prompt, "system prompt (llama.cpp: -sys)");
  sub->add_option("-p,--prompt", o->prompt, "first user message");
  sub->add_flag("--single-turn", o->single_turn, "answer -p and exit");
  sub->add_flag("--cnv,--conversation", o->conversation,
                "conversation mode (always on; accepted for llama.cpp's -cnv)");
  sub->add_option("--chat-template-file", o->template_file, "Jinja chat template file (overrides the model's)");
  sub->add_option("-n,--predict,--n-predict", o->n_predict, "most tokens per reply (-1 = until end of generation)");
  sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens (llama.cpp's flag)");
  add_engine_options(sub, o->context, o->backend, o->perf);
  add_sampling_options(sub, o->sampling);
  add_spec_options(sub, o->spec);
  set_action(sub, [o] { return run_chat(*o); });
}

}  // namespace opal::tools
