// Embeddings on `opal serve` (server/routes_embeddings.cpp): OpenAI's
// /v1/embeddings and llama-server's /embedding shapes, against llama.cpp's
// golden vectors (../shared/golden/embeddings); pooling from --pooling or the
// GGUF (absent: none, so /v1/embeddings is a 400 and /embedding gives every
// token's vector); errors named; chat and embeddings from one server at once;
// and the official `openai` client (tests/server/node/embeddings.mjs) on the
// real binary with float and base64.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "server/server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

const char* const kTexts[] = {"The quick brown fox jumps over the lazy dog.",
                              "Once upon a time, there was a little robot.",
                              "Embeddings map text to vectors; similar texts land close together."};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<std::vector<float>> golden(const std::string& name) {
  std::ifstream f(shared_path("golden/embeddings/" + name));
  const json j = json::parse(f);
  std::vector<std::vector<float>> out;
  for (const auto& d : j["data"]) out.push_back(d["embedding"].get<std::vector<float>>());
  return out;
}

server::ServerOptions embed_options(const std::string& stem, const std::string& pooling, int np = 2) {
  server::ServerOptions o = default_options(np, 512);
  o.model = golden_model(stem);
  o.alias = stem;
  o.pooling = pooling;
  return o;
}

json texts_json() {
  json a = json::array();
  for (const char* t : kTexts) a.push_back(t);
  return a;
}

std::string error_message(const httplib::Result& r) {
  return r ? json::parse(r->body)["error"]["message"].get<std::string>() : "(no response)";
}

TEST(ServeEmbeddings, OpenAiShapeMatchesLlamaCppGolden) {
  LocalServer srv(embed_options("tiny-llama-f32", "mean"));
  auto r = srv.post("/v1/embeddings", {{"input", texts_json()}, {"model", "whatever"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "tiny-llama-f32");
  const auto want = golden("tiny-llama-f32.mean.json");
  ASSERT_EQ(j["data"].size(), 3u);
  int64_t n_tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    EXPECT_GE(cosine(j["data"][i]["embedding"].get<std::vector<float>>(), want[i]), 0.9999) << i;
    auto t = srv.post("/tokenize", {{"content", kTexts[i]}, {"add_special", true}});
    n_tokens += int64_t(json::parse(t->body)["tokens"].size());
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], n_tokens);
  EXPECT_EQ(j["usage"]["total_tokens"], n_tokens);

  // base64: the same little-endian float32 bytes.
  auto b = srv.post("/v1/embeddings", {{"input", kTexts[0]}, {"encoding_format", "base64"}});
  ASSERT_EQ(b->status, 200) << b->body;
  const std::string s = json::parse(b->body)["data"][0]["embedding"];
  EXPECT_EQ(s.size(), (256 * 4 + 2) / 3 * 4);
  EXPECT_EQ(s.substr(s.size() - 2), "==");  // 1024 bytes = 341 groups + 1 byte
}

TEST(ServeEmbeddings, NativeShapeAndPoolingNoneWithoutGgufPooling) {
  {  // pooled: [{"index": i, "embedding": [[...]]}], the same vector as /v1/embeddings
    LocalServer srv(embed_options("tiny-qwen3-f32", "last"));
    auto n = srv.post("/embedding", {{"content", texts_json()}});
    ASSERT_EQ(n->status, 200) << n->body;
    const json j = json::parse(n->body);
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 3u);
    const auto want = golden("tiny-qwen3-f32.last.json");
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(j[i]["index"], i);
      ASSERT_EQ(j[i]["embedding"].size(), 1u);
      EXPECT_GE(cosine(j[i]["embedding"][0].get<std::vector<float>>(), want[i]), 0.9999);
    }
    auto alias = srv.post("/embeddings", {{"input", kTexts[1]}});  // llama-server's other spelling
    ASSERT_EQ(alias->status, 200) << alias->body;
    EXPECT_GE(cosine(json::parse(alias->body)[0]["embedding"][0].get<std::vector<float>>(), want[1]), 0.9999);
  }
  // The tiny GGUFs have no pooling_type: none, as llama.cpp.
  LocalServer srv(embed_options("tiny-qwen3-f32", ""));
  auto v1 = srv.post("/v1/embeddings", {{"input", kTexts[0]}});
  ASSERT_EQ(v1->status, 400) << v1->body;
  EXPECT_NE(error_message(v1).find("qwen3.pooling_type"), std::string::npos) << v1->body;
  EXPECT_NE(error_message(v1).find("--pooling"), std::string::npos) << v1->body;
  auto n = srv.post("/embedding", {{"content", kTexts[0]}});
  ASSERT_EQ(n->status, 200) << n->body;
  const json j = json::parse(n->body);
  auto t = srv.post("/tokenize", {{"content", kTexts[0]}, {"add_special", true}});
  const size_t n_tok = json::parse(t->body)["tokens"].size();
  ASSERT_EQ(j[0]["embedding"].size(), n_tok);  // one vector per token
  // Raw (not normalised), and the last token's is the last-pooled vector's direction.
  const auto last = j[0]["embedding"][n_tok - 1].get<std::vector<float>>();
  double norm = 0;
  for (float x : last) norm += double(x) * x;
  EXPECT_GT(std::fabs(std::sqrt(norm) - 1.0), 1e-3);
  EXPECT_GE(cosine(last, golden("tiny-qwen3-f32.last.json")[0]), 0.9999);
}

TEST(ServeEmbeddings, BadInputIsA400NamingIt) {
  LocalServer srv(embed_options("tiny-qwen3-f32", "mean", 1));
  auto check = [&](const json& body, const std::string& want, const char* path = "/v1/embeddings") {
    auto r = srv.post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body.dump() << " -> " << r->body;
    EXPECT_NE(error_message(r).find(want), std::string::npos) << body.dump() << " -> " << r->body;
  };
  check(json::object(), "'input' is required");
  check({{"input", json::array()}}, "'input' is an empty array");
  check({{"input", json::array({"a", ""})}}, "'input[1]' is empty");
  check({{"input", json::array({"a", json::array()})}}, "'input[1]' is empty");
  check({{"input", "hi"}, {"encoding_format", "hex"}}, "'encoding_format' must be 'float' or 'base64'");
  check({{"input", "hi"}, {"dimensions", 17}}, "'dimensions' 17 is not supported");
  check({{"input", json::array({json::array({1, 999999})})}}, "999999");
  check({{"input", json::array({true})}}, "'input[0]' must be a string or an array of token ids");
  std::string longer;
  for (int i = 0; i < 700; ++i) longer += "fox ";
  check({{"input", json::array({"short", longer})}}, "'input[1]' has ");
  check({{"input", longer}}, "more than the context holds");
  check(json::object(), "'content' (or 'input') is required", "/embedding");
  // The server goes on answering.
  auto ok = srv.post("/v1/embeddings", {{"input", "fine"}});
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_NE(error_of([] { server::Server s(embed_options("tiny-qwen3-f32", "max")); }).find("unknown pooling 'max'"),
            std::string::npos);
}

TEST(ServeEmbeddings, ChatAndEmbeddingsFromOneServerAtOnce) {
  LocalServer srv(embed_options("tiny-qwen3-f32", "last", 2));
  std::string raw;
  std::atomic<int> chunks{0};
  std::thread chat = stream_hi_chat(srv.port(), &raw, &chunks);
  const auto want = golden("tiny-qwen3-f32.last.json");
  for (int k = 0; k < 5; ++k) {
    auto r = srv.post("/v1/embeddings", {{"input", texts_json()}});
    ASSERT_EQ(r->status, 200) << r->body;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_GE(cosine(json::parse(r->body)["data"][i]["embedding"].get<std::vector<float>>(), want[i]), 0.9999);
  }
  srv.server().shutdown();
  chat.join();
  EXPECT_GT(chunks.load(), 0);
  EXPECT_NE(raw.find("[DONE]"), std::string::npos);
}

// The official openai client on the real binary (--embeddings accepted as llama-server's flag).
TEST(ServeEmbeddings, OpenAiClientFloatAndBase64AgainstGolden) {
  const std::string dir = source_dir() + "/tests/server/node";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/openai/package.json"))
      << dir << "/node_modules/openai is missing: run scripts/setup.sh (it runs `npm ci` there)";
  ServeProcess p("-m " + golden_model("tiny-qwen3-q8_0") +
                 " --np 2 -c 1024 -t 1 -a tiny --api-key test-key --embeddings --pooling mean");
  ASSERT_TRUE(p.ready()) << p.log();
  std::string out;
  const int rc =
      run_command("cd " + dir + " && OPAL_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                      "/v1 OPAL_API_KEY=test-key OPAL_MODEL=tiny OPAL_MIN_COSINE=0.999 OPAL_GOLDEN=" +
                      shared_path("golden/embeddings/tiny-qwen3-q8_0.mean.json") + " timeout 120 node embeddings.mjs",
                  &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

}  // namespace
}  // namespace opal::test
