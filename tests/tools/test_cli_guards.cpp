// CLI guard rails (issue #20): negative sizes rejected naming the flag, -t
// above the core count capped with a warning (--threads-force keeps it), -c
// above the training context warned, and `opal chat`'s Ctrl-C (stops the
// reply, keeps the chat; at the prompt it exits with the summary) and unknown
// /commands (a help line, nothing sent to the model).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "support/test_support.h"

namespace opal {
namespace {

using Clock = std::chrono::steady_clock;

std::string run_merged(const std::string& args, int* status) {
  std::string out;
  *status = test::run_command(test::opal_binary() + " " + args + " 2>&1", &out);
  return out;
}

std::string stories() { return test::shared_path("models/stories260K.gguf"); }

TEST(CliGuards, NegativeSizesAreRejectedNamingTheFlag) {
  struct Case {
    std::string args, flag;
  };
  const std::vector<Case> cases = {
      {"run -m " + stories() + " -p x -n -5", "-n"},
      {"run -m " + stories() + " -p x -c -5", "--ctx-size"},
      {"run -m " + stories() + " -p x -b 0", "--batch-size"},
      {"run -m " + stories() + " -p x -t -2", "--threads"},
      {"chat -m " + stories() + " -n -3 --single-turn -p x", "-n"},
      {"serve -m " + stories() + " --port 0 --http-threads -1", "--http-threads"},
      {"serve -m " + stories() + " --port 0 --np 0", "--np"},
      {"serve -m " + stories() + " --port 0 --timeout -1", "--to"},
      {"serve -m " + stories() + " --port 70000", "--port"},
  };
  for (const Case& c : cases) {
    int rc = 0;
    const std::string out = run_merged(c.args, &rc);
    EXPECT_NE(rc, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.flag), std::string::npos) << c.args << "\n" << out;
  }
  int rc = 0;  // -1 stays legal (until end of generation)
  const std::string ok = run_merged("run -m " + stories() + " -p Once -n -1 -c 64 -t 1", &rc);
  EXPECT_EQ(rc, 0) << ok;
}

TEST(CliGuards, ThreadsAboveTheCoresAreCappedUnlessForced) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string many = std::to_string(cores * 64);
  int rc = 0;
  const auto t0 = Clock::now();
  const std::string out = run_merged("run -m " + stories() + " -p Once -n 5 -t " + many, &rc);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("warning: -t " + many + " is more than this machine's " + std::to_string(cores) + " cores"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("--threads-force"), std::string::npos) << out;
  EXPECT_LT(s, 30.0) << out;  // uncapped, 256 threads on 2 cores took over a minute for 5 tokens
  const std::string at = run_merged("run -m " + stories() + " -p Once -n 2 -t " + std::to_string(cores), &rc);
  EXPECT_EQ(at.find("warning: -t"), std::string::npos) << at;
  const std::string forced =
      run_merged("run -m " + stories() + " -p Once -n 1 --threads-force -t " + std::to_string(cores + 1), &rc);
  ASSERT_EQ(rc, 0) << forced;
  EXPECT_EQ(forced.find("warning: -t"), std::string::npos) << forced;
}

TEST(CliGuards, ContextAboveTrainingIsWarned) {
  int rc = 0;  // stories260K was trained with 2048 tokens and has no rope scaling
  const std::string out = run_merged("run -m " + stories() + " -p Once -n 2 -t 1 -c 4096", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("-c 4096 is above the model's training context of 2048"), std::string::npos) << out;
  EXPECT_NE(out.find("no rope scaling"), std::string::npos) << out;
  const std::string fits = run_merged("run -m " + stories() + " -p Once -n 2 -t 1 -c 2048", &rc);
  EXPECT_EQ(fits.find("training context"), std::string::npos) << fits;
}

// `opal chat` as a child with pipes: stdin from the test, stdout into a pipe
// the test can stop reading (the reply then blocks mid-way: Ctrl-C surely
// lands during it), stderr into a file.
class ChatChild {
 public:
  explicit ChatChild(const std::string& args) {
    err_path_ = test::temp_dir() + "/chat_stderr.txt";
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    fcntl(out[1], F_SETPIPE_SZ, 4096);  // a small pipe fills after a few hundred tokens
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(in[1]);
      close(out[0]);
      execl("/bin/sh", "sh", "-c", ("exec " + test::opal_binary() + " chat " + args).c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
  }
  ~ChatChild() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  void send(const std::string& s) { ASSERT_EQ(write(in_, s.data(), s.size()), ssize_t(s.size())); }
  // Reads what stdout has now (waiting up to timeout_ms for the first byte).
  std::string read_some(int timeout_ms) {
    std::string got;
    pollfd p{out_, POLLIN, 0};
    char buf[4096];
    while (poll(&p, 1, got.empty() ? timeout_ms : 0) > 0) {
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    out_text_ += got;
    return got;
  }
  std::string err() const {
    std::ifstream f(err_path_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  // Waits (draining stdout) until stderr contains `what`.
  bool wait_err(const std::string& what, int timeout_s) {
    const auto end = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < end) {
      read_some(10);
      if (err().find(what) != std::string::npos) return true;
    }
    return false;
  }
  void interrupt() { kill(pid_, SIGINT); }
  void close_stdin() {
    close(in_);
    in_ = -1;
  }
  int wait_exit(int timeout_s) {
    const auto end = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < end) {
      read_some(10);
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
    }
    return -1;
  }
  const std::string& out_text() const { return out_text_; }
  int pid() const { return pid_; }

 private:
  int pid_ = -1, in_ = -1, out_ = -1;
  bool exited_ = false;
  std::string err_path_, out_text_;
};

TEST(ChatCtrlC, StopsTheReplyThenExitsAtThePromptWithTheSummary) {
  // A reply of up to 2,000 tokens (--ignore-eos): far more than the pipe holds.
  ChatChild chat("-m " + stories() + " -c 2048 -n 2000 --ignore-eos --temp 0 -t 1");
  ASSERT_GT(chat.pid(), 0);
  chat.send("Once upon a time\n");
  ASSERT_FALSE(chat.read_some(60000).empty()) << chat.err();  // the reply started
  // Stop reading: the reply fills the pipe and waits there.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  chat.interrupt();
  ASSERT_TRUE(chat.wait_err("[reply stopped", 30)) << chat.err();
  // Still running: an unknown command gets a help line and is not sent to the model.
  chat.send("/bogus thing\n");
  ASSERT_TRUE(chat.wait_err("unknown command '/bogus'", 30)) << chat.err();
  EXPECT_NE(chat.err().find("/clear"), std::string::npos) << chat.err();
  // Ctrl-C at the prompt: exit 0 with the summary line.
  chat.interrupt();
  EXPECT_EQ(chat.wait_exit(30), 0) << chat.err();
  const std::string err = chat.err();
  const size_t at = err.find("generation: ");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_LT(std::stoi(err.substr(at + 12)), 2000) << "the reply was not stopped: " << err;
}

TEST(ChatCtrlC, EndOfInputExitsWithTheSummary) {
  ChatChild chat("-m " + stories() + " -n 4 --temp 0 -t 1");
  ASSERT_GT(chat.pid(), 0);
  chat.send("/nope\nOnce\n");
  chat.close_stdin();  // Ctrl-D
  EXPECT_EQ(chat.wait_exit(60), 0) << chat.err();
  const std::string err = chat.err();
  EXPECT_NE(err.find("unknown command '/nope'"), std::string::npos) << err;
  EXPECT_NE(err.find("generation: 4 tokens"), std::string::npos) << err;  // one turn: /nope went nowhere
}

}  // namespace
}  // namespace opal
