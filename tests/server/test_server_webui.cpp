// The chat page (server/webui, server/webui.cpp): the bundled files served at
// `/` with Content-Type, ETag / 304, Cache-Control and gzip; JSON clients at
// `/`; the page public under --api-key; --no-webui (404) and --path DIR; and
// the page itself in a real headless browser (Debian's chromium driven by
// playwright-core: tests/server/node/webui_browser.mjs), which saves screenshots.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "raw_socket.h"
#include "server/webui.h"
#include "server_test_util.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

using server::accepts_gzip;
using server::content_type_for;
using server::etag_matches;
using server::find_bundled;
using server::prefers_json;

TEST(WebUiRules, AcceptEncoding) {
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("gzip, deflate, br, zstd"));
  EXPECT_TRUE(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("deflate, br"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("*, gzip;q=0.0"));
}

TEST(WebUiRules, IfNoneMatchAndAccept) {
  EXPECT_TRUE(etag_matches("\"abc\"", "\"abc\""));
  EXPECT_TRUE(etag_matches("\"x\", W/\"abc\"", "\"abc\""));
  EXPECT_TRUE(etag_matches("*", "\"abc\""));
  EXPECT_FALSE(etag_matches("", "\"abc\""));
  EXPECT_FALSE(etag_matches("\"abd\"", "\"abc\""));
  EXPECT_TRUE(prefers_json("application/json"));
  EXPECT_TRUE(prefers_json("application/json, text/plain"));
  EXPECT_FALSE(prefers_json("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"));
  EXPECT_FALSE(prefers_json("*/*"));
  EXPECT_FALSE(prefers_json(""));
  EXPECT_FALSE(prefers_json("application/json;q=0"));
  EXPECT_EQ(content_type_for("a/b/app.JS"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type_for("/v1/models"), "");
  EXPECT_EQ(content_type_for("/dir.d/file"), "");
}

TEST(WebUiRules, TheBundleHasThePage) {
  const server::WebAsset* index = find_bundled("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->path, "/index.html");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_NE(index->data.find("<script type=\"module\" src=\"app.js\">"), std::string::npos);
  for (const char* f : {"/app.js", "/markdown.js", "/style.css", "/favicon.svg"}) {
    const server::WebAsset* a = find_bundled(f);
    ASSERT_NE(a, nullptr) << f;
    EXPECT_FALSE(a->data.empty()) << f;
    EXPECT_EQ(a->etag.size(), 18u) << f;  // 16 hex digits, quoted
    EXPECT_EQ(a->etag.front(), '"');
    // The page fetches nothing from elsewhere (no CDN): no absolute http(s) URL to load.
    EXPECT_EQ(a->data.find("src=\"http"), std::string::npos) << f;
    EXPECT_EQ(a->data.find("href=\"http"), std::string::npos) << f;
    EXPECT_EQ(a->data.find("@import"), std::string::npos) << f;
  }
  EXPECT_EQ(find_bundled("/nothing.js"), nullptr);
}

// One request over a fresh connection (Connection: close), read to its end.
struct Raw {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

Raw raw_get(int port, const std::string& path, const std::string& extra_headers = {},
            const std::string& method = "GET") {
  Raw r;
  const int fd = raw_connect(port);
  if (fd < 0) return r;
  raw_send(fd, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers + "\r\n");
  bool closed = false;
  const std::string text = raw_read(fd, 10000, &closed);
  ::close(fd);
  const size_t head_end = text.find("\r\n\r\n");
  if (text.size() < 12 || head_end == std::string::npos) return r;
  r.status = std::stoi(text.substr(9, 3));
  size_t pos = text.find("\r\n") + 2;
  while (pos < head_end) {
    const size_t eol = text.find("\r\n", pos);
    const std::string line = text.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r.headers[name] = r.headers.count(name) ? r.headers[name] + ", " + value : value;
    pos = eol + 2;
  }
  r.body = text.substr(head_end + 4);
  return r;
}

class WebUi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new LocalServer(default_options()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static LocalServer* server_;
};
LocalServer* WebUi::server_ = nullptr;

TEST_F(WebUi, RootServesTheBundledPageWithItsHeaders) {
  const server::WebAsset* index = find_bundled("/index.html");
  ASSERT_NE(index, nullptr);
  const Raw r = raw_get(port(), "/", "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.headers.at("etag"), std::string(index->etag));
  EXPECT_EQ(r.headers.at("cache-control"), "no-cache");
  EXPECT_EQ(r.headers.count("content-encoding"), 0u);  // the client did not offer gzip
  EXPECT_NE(r.headers.at("content-security-policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(r.headers.at("x-content-type-options"), "nosniff");
  EXPECT_EQ(r.body, index->data);
  EXPECT_EQ(raw_get(port(), "/index.html").body, index->data);

  const Raw js = raw_get(port(), "/app.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.headers.at("content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js.body, find_bundled("/app.js")->data);
  EXPECT_EQ(raw_get(port(), "/style.css").headers.at("content-type"), "text/css; charset=utf-8");
  EXPECT_EQ(raw_get(port(), "/favicon.svg").headers.at("content-type"), "image/svg+xml");
  // HEAD: the GET's headers, no body.
  const Raw head = raw_get(port(), "/app.js", "", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.at("content-length"), std::to_string(js.body.size()));
  EXPECT_TRUE(head.body.empty());
}

TEST_F(WebUi, ETagRevalidationAndGzip) {
  const server::WebAsset* app = find_bundled("/app.js");
  ASSERT_NE(app, nullptr);
  const Raw again = raw_get(port(), "/app.js", "If-None-Match: " + std::string(app->etag) + "\r\n");
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(again.headers.at("etag"), std::string(app->etag));
  EXPECT_EQ(raw_get(port(), "/app.js", "If-None-Match: \"0000000000000000\"\r\n").status, 200);

  ASSERT_FALSE(app->gzip.empty()) << "the build found no gzip (cmake/embed_webui.cmake)";
  const Raw gz = raw_get(port(), "/app.js", "Accept-Encoding: gzip, deflate, br\r\n");
  ASSERT_EQ(gz.status, 200);
  EXPECT_EQ(gz.headers.at("content-encoding"), "gzip");
  EXPECT_NE(gz.headers.at("vary").find("Accept-Encoding"), std::string::npos);
  ASSERT_GE(gz.body.size(), 2u);
  EXPECT_EQ(uint8_t(gz.body[0]), 0x1f);
  EXPECT_EQ(uint8_t(gz.body[1]), 0x8b);
  EXPECT_LT(gz.body.size(), app->data.size());
  const std::string path = temp_dir() + "/app.js.gz";
  std::ofstream(path, std::ios::binary) << gz.body;
  std::string out;
  ASSERT_EQ(run_command("gzip -dc " + path, &out), 0) << out;
  EXPECT_EQ(out, app->data);
  EXPECT_EQ(raw_get(port(), "/app.js", "Accept-Encoding: gzip;q=0\r\n").headers.count("content-encoding"), 0u);
}

TEST_F(WebUi, JsonClientsAndApiRoutesAreUnchanged) {
  const Raw j = raw_get(port(), "/", "Accept: application/json\r\n");
  ASSERT_EQ(j.status, 200);
  EXPECT_EQ(j.headers.at("content-type"), "application/json");
  const json body = json::parse(j.body);
  EXPECT_EQ(body["name"], "opal");
  EXPECT_EQ(body["status"], "ok");
  EXPECT_TRUE(body["model"].is_string());
  EXPECT_FALSE(body["endpoints"].empty());
  // Unknown paths stay JSON 404s; the API routes answer as before.
  const Raw missing = raw_get(port(), "/nothing.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(json::parse(missing.body).contains("error"));
  const Raw v1 = raw_get(port(), "/v1/nothing");
  EXPECT_EQ(v1.status, 404);
  EXPECT_NE(json::parse(v1.body)["error"]["message"].get<std::string>().find("/v1/nothing"), std::string::npos);
  EXPECT_EQ(json::parse(raw_get(port(), "/health").body)["status"], "ok");
  EXPECT_EQ(raw_get(port(), "/../../etc/passwd").status, 404);
}

TEST(WebUiOptions, ThePageIsPublicUnderAnApiKey) {
  server::ServerOptions o = default_options();
  o.api_key = "k";
  LocalServer s(o);
  EXPECT_EQ(raw_get(s.port(), "/").status, 200);
  EXPECT_EQ(raw_get(s.port(), "/app.js").status, 200);
  EXPECT_EQ(raw_get(s.port(), "/props").status, 401);
  EXPECT_EQ(raw_get(s.port(), "/nothing.js").status, 401);  // not a file of the page: the key is asked for
  auto r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST(WebUiOptions, NoWebuiAnswers404) {
  server::ServerOptions o = default_options();
  o.webui = false;
  LocalServer s(o);
  for (const char* path : {"/", "/index.html", "/app.js"}) {
    const Raw r = raw_get(s.port(), path, "Accept: text/html\r\n");
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.headers.count("content-type") ? r.headers.at("content-type") : "", "application/json") << path;
    EXPECT_TRUE(json::parse(r.body).contains("error")) << path;
  }
  EXPECT_EQ(raw_get(s.port(), "/health").status, 200);
}

TEST(WebUiOptions, PathServesADirectoryReadAtEachRequest) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(temp_dir()) / "webui-path";
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "index.html") << "<p>one</p>";
  std::ofstream(dir / "sub" / "x.css") << "p{}";
  std::ofstream(fs::path(temp_dir()) / "secret.txt") << "secret";
  server::ServerOptions o = default_options();
  o.webui_path = dir.string();
  LocalServer s(o);
  Raw r = raw_get(s.port(), "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<p>one</p>");
  EXPECT_EQ(r.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.headers.at("cache-control"), "no-store");
  std::ofstream(dir / "index.html") << "<p>two</p>";  // edited: served without a restart
  EXPECT_EQ(raw_get(s.port(), "/").body, "<p>two</p>");
  r = raw_get(s.port(), "/sub/x.css");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), "text/css; charset=utf-8");
  EXPECT_EQ(raw_get(s.port(), "/app.js").status, 404);  // not the bundle's
  EXPECT_EQ(raw_get(s.port(), "/../secret.txt").status, 404);
  EXPECT_EQ(raw_get(s.port(), "/sub/../../secret.txt").status, 404);
  EXPECT_EQ(raw_get(s.port(), "/%2e%2e/secret.txt").status, 404);
  fs::create_symlink(fs::path(temp_dir()) / "secret.txt", dir / "link.txt");
  EXPECT_EQ(raw_get(s.port(), "/link.txt").status, 404);  // a link out of DIR
}

TEST(WebUiOptions, PathWithoutIndexIsRefusedNamingTheFlag) {
  server::ServerOptions o = default_options();
  o.webui_path = temp_dir() + "/no-such-webui-dir";
  expect_error([&] { server::Server s(o); }, {"--path", "no-such-webui-dir", "index.html"});
}

// The binary's flags: --no-webui gives 404 at /, the default serves the page.
TEST(WebUiProcess, NoWebuiFlag) {
  ServeProcess on("-m " + stories_model());
  ASSERT_TRUE(on.ready());
  EXPECT_EQ(raw_get(on.port(), "/").status, 200);
  ServeProcess off("-m " + stories_model() + " --no-webui");
  ASSERT_TRUE(off.ready());
  EXPECT_EQ(raw_get(off.port(), "/").status, 404);
  EXPECT_EQ(raw_get(off.port(), "/health").status, 200);
  std::string out;
  EXPECT_EQ(run_command(opal_binary() + " serve --port 0 -m " + stories_model() + " --path /nonexistent-dir", &out), 1);
  EXPECT_NE(out.find("--path /nonexistent-dir"), std::string::npos) << out;
}

// The page in Debian's chromium, driven by playwright-core (tests/server/node/webui_browser.mjs).
TEST(WebUiBrowser, ChatStreamsStopsAndClearsInChromium) {
  const std::string dir = source_dir() + "/tests/server/node";
  const char* chromium_env = std::getenv("CHROMIUM");
  const std::string chromium = chromium_env ? chromium_env : "/usr/bin/chromium";
  ASSERT_TRUE(std::filesystem::exists(chromium))
      << "no browser at " << chromium << ": apt-get install chromium (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/playwright-core/package.json"))
      << dir << "/node_modules/playwright-core is missing: run scripts/setup.sh (it runs `npm ci` there)";
  std::string version;
  ASSERT_EQ(run_command("node --version", &version), 0) << "node is not installed (scripts/setup.sh installs it)";
  // One slot with a long context: the Stop check needs a generation longer than its wait.
  ServeProcess p("-m " + stories_model() + " -a stories --metrics -np 1 -c 32768");
  ASSERT_TRUE(p.ready());
  const std::string shots = (std::filesystem::path(opal_binary()).parent_path() / "test-output" / "webui").string();
  std::string out;
  const int rc = run_command("cd " + dir + " && OPAL_URL=http://127.0.0.1:" + std::to_string(p.port()) +
                                 "/ OPAL_MODEL=stories OPAL_SCREENSHOT_DIR=" + shots + " CHROMIUM=" + chromium +
                                 " timeout 120 node webui_browser.mjs",
                             &out);
  std::cout << out;  // the checks and the screenshots' paths, in ctest's output
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << p.log();
  EXPECT_NE(out.find("webui browser: all checks passed"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(shots + "/webui-chat.png"));
  RecordProperty("screenshot", shots + "/webui-chat.png");
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait_exit(60), 0) << p.log();
}

}  // namespace
}  // namespace opal::test
