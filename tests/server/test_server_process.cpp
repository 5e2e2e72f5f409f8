// The real `opal serve` binary: SIGTERM with a stream in flight, the default
// model, and the official `openai` npm client against it.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

TEST(ServeProcess, SigtermEndsStreamAndExitsZero) {
  ServeProcess p("-m " + stories_model() + " --np 2");
  ASSERT_TRUE(p.ready());
  std::atomic<int> chunks{0};
  std::string raw;
  std::thread client = stream_hi_chat(p.port(), &raw, &chunks, 60);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (chunks.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  client.join();
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
  const SseStream st = parse_sse(raw);
  ASSERT_TRUE(st.well_formed) << st.error;
  ASSERT_FALSE(st.events.empty());
  EXPECT_TRUE(st.done_marker);
  EXPECT_TRUE(st.events.back()["choices"][0]["finish_reason"].is_string());
  EXPECT_NE(p.log().find("serve: stopped"), std::string::npos) << p.log();
}

TEST(ServeProcess, DefaultModelWhenNoDashM) {
  ServeProcess p("--np 1");
  ASSERT_TRUE(p.ready()) << p.log();
  httplib::Client c("127.0.0.1", p.port());
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const std::string id = json::parse(m->body)["data"][0]["id"];
  EXPECT_NE(id.find("opal-kjv.gguf"), std::string::npos) << id;
  auto r = c.Post(
      "/v1/chat/completions",
      json{{"messages", json::array({json{{"role", "user"}, {"content", "In the beginning"}}})}, {"max_tokens", 8}}
          .dump(),
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"].get<int>() <= 8, true);
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

TEST(ServeProcess, BadModelFailsCleanly) {
  std::string out;
  const int rc = run_command(opal_binary() + " serve --port 0 -m /nonexistent/model.gguf", &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("/nonexistent/model.gguf"), std::string::npos) << out;
}

// The official `openai` npm package (tests/server/node) against `opal serve`.
TEST(ServeProcess, OpenAiNodeClient) {
  const std::string dir = source_dir() + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/openai/package.json"))
      << dir << "/node_modules is missing: run scripts/setup.sh (it runs `npm ci` there)";
  std::string version;
  ASSERT_EQ(run_command("node --version", &version), 0) << "node is not installed (scripts/setup.sh installs it)";
  ServeProcess p("-m " + stories_model() + " --np 2 -a stories --api-key test-key");
  ASSERT_TRUE(p.ready());
  std::string out;
  const int rc = run_command("cd " + dir + " && OPAL_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                                 "/v1 OPAL_API_KEY=test-key OPAL_MODEL=stories timeout 120 node openai_client.mjs",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("openai client: all checks passed"), std::string::npos) << out;
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

}  // namespace
}  // namespace opal::test
