// Models by name (hub/) against a mock Hugging Face hub on 127.0.0.1 (a
// cpp-httplib server in this process, real HTTP): the tree API and resolve
// URLs with X-Linked-Etag / X-Linked-Size, Range requests, connections that
// drop mid-file, wrong checksums, HTTP errors, a token, offline use of the
// cache, split models; and the tag picking rules on their own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "hub/hub.h"
#include "support/test_support.h"

namespace opal::test {
namespace {

namespace fs = std::filesystem;
using hub::pick_gguf;

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  static const char* digits = "0123456789abcdef";
  for (unsigned i = 0; i < len; ++i) {
    hex += digits[md[i] >> 4];
    hex += digits[md[i] & 15];
  }
  return hex;
}

// A file whose bytes differ all along (a shifted copy would show).
std::string make_content(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + uint32_t(seed);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = char(x);
  }
  return s;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The mock hub: one repository per entry of `repos` (path -> content).
class MockHub {
 public:
  std::map<std::string, std::map<std::string, std::string>> repos;
  std::map<std::string, std::string> wrong_sha;  // path -> the sha256 announced instead of the real one
  std::string token;                             // non-empty: every request needs "Authorization: Bearer <token>"
  std::atomic<int> drops{0};                     // transfers still to cut after half their bytes
  std::atomic<int> gets{0}, heads{0};
  std::mutex mu;
  std::vector<std::string> ranges;  // Range headers of the GETs, in order

  MockHub() {
    srv_.Get(R"(/api/models/([^/]+/[^/]+)/tree/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      auto it = repos.find(repo_key(req.matches[1].str(), req.matches[2].str()));
      if (it == repos.end()) return not_found(res);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& [path, data] : it->second)
        list.push_back({{"type", "file"},
                        {"path", path},
                        {"size", data.size()},
                        {"lfs", {{"oid", sha256_hex(data)}, {"size", data.size()}}}});
      res.set_content(list.dump(), "application/json");
    });
    srv_.Get(R"(/([^/]+/[^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      auto it = repos.find(repo_key(req.matches[1].str(), req.matches[2].str()));
      if (it == repos.end()) return not_found(res);
      const std::string path = req.matches[3].str();
      auto f = it->second.find(path);
      if (f == it->second.end()) return not_found(res);
      const std::string& data = f->second;
      const std::string sha = wrong_sha.count(path) ? wrong_sha[path] : sha256_hex(data);
      res.set_header("X-Linked-Etag", "\"" + sha + "\"");
      res.set_header("X-Linked-Size", std::to_string(data.size()));
      res.set_header("ETag", "\"" + sha + "\"");
      if (req.method == "HEAD") {
        ++heads;
        res.set_header("Content-Length", std::to_string(data.size()));
        return;
      }
      ++gets;
      {
        std::lock_guard<std::mutex> lk(mu);
        ranges.push_back(req.get_header_value("Range"));
      }
      const bool drop = drops.load() > 0 && drops-- > 0;
      res.set_content_provider(data.size(), "application/octet-stream",
                               [&data, drop](size_t offset, size_t length, httplib::DataSink& sink) {
                                 size_t n = length;
                                 if (drop) n = std::max<size_t>(1, (data.size() - offset) / 2);
                                 n = std::min(n, length);
                                 for (size_t done = 0; done < n;) {
                                   const size_t k = std::min<size_t>(4096, n - done);
                                   if (!sink.write(data.data() + offset + done, k)) return false;
                                   done += k;
                                 }
                                 return !drop;  // false: the connection is cut here
                               });
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~MockHub() { stop(); }
  void stop() {
    srv_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  // A repository's entry in `repos`: "user/repo" for main, "user/repo@REV" for another revision (as the URL has it).
  static std::string repo_key(const std::string& repo, const std::string& rev) {
    return rev == "main" ? repo : repo + "@" + rev;
  }
  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.get_header_value("Authorization") == "Bearer " + token) return true;
    res.status = 401;
    res.set_content(R"({"error":"Invalid credentials"})", "application/json");
    return false;
  }
  static void not_found(httplib::Response& res) {
    res.status = 404;
    res.set_content(R"({"error":"Repository not found"})", "application/json");
  }
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
};

class Hub : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("opal_hub_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    hub_.repos["user/tiny-GGUF"] = {{"tiny-Q8_0.gguf", make_content(300000, 1)},
                                    {"tiny-Q4_K_M.gguf", make_content(200000, 2)},
                                    {"mmproj-tiny-f16.gguf", make_content(1000, 3)},
                                    {"README.md", "# tiny\n"}};
    opts_.endpoint = hub_.endpoint();
    opts_.cache_dir = dir_.string();
    opts_.progress = false;
  }
  void TearDown() override { fs::remove_all(dir_); }
  MockHub hub_;
  hub::HubOptions opts_;
  fs::path dir_;
};

TEST(HubPick, TagPicksTheFileDefaultIsQ4KM) {
  const std::vector<std::string> files = {"a-Q8_0.gguf", "a-Q4_K_M.gguf", "a-Q4_K_S.gguf", "mmproj-a-Q8_0.gguf",
                                          "README.md"};
  EXPECT_EQ(pick_gguf(files, "q8_0"), std::vector<std::string>{"a-Q8_0.gguf"});
  EXPECT_EQ(pick_gguf(files, "Q4_K_S"), std::vector<std::string>{"a-Q4_K_S.gguf"});
  EXPECT_EQ(pick_gguf(files, ""), std::vector<std::string>{"a-Q4_K_M.gguf"});
  // Q4_K is not a word of Q4_K_M: no partial match.
  const std::string e = error_of([&] { pick_gguf(files, "q4_k"); });
  EXPECT_NE(e.find("no GGUF file for the tag 'q4_k'"), std::string::npos) << e;
  EXPECT_NE(e.find("a-Q4_K_M.gguf"), std::string::npos) << e;  // lists what there is
  EXPECT_NE(error_of([] { pick_gguf({"README.md"}, ""); }).find("no GGUF"), std::string::npos);
}

TEST(HubPick, SplitModelGivesEveryPartInOrder) {
  const std::vector<std::string> files = {"Q8_0/m-Q8_0-00002-of-00003.gguf", "Q8_0/m-Q8_0-00001-of-00003.gguf",
                                          "Q8_0/m-Q8_0-00003-of-00003.gguf", "m-F16.gguf"};
  EXPECT_EQ(pick_gguf(files, "q8_0"),
            (std::vector<std::string>{"Q8_0/m-Q8_0-00001-of-00003.gguf", "Q8_0/m-Q8_0-00002-of-00003.gguf",
                                      "Q8_0/m-Q8_0-00003-of-00003.gguf"}));
  const std::string e = error_of([] {
    pick_gguf({"m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00003-of-00004.gguf"}, "q8_0");
  });
  EXPECT_NE(e.find("lacks parts: m-Q8_0-00002-of-00002.gguf"), std::string::npos) << e;
}

TEST(HubPick, BadNamesAreRefused) {
  EXPECT_NE(error_of([] { hub::parse_hf_ref("no-slash"); }).find("user/repo"), std::string::npos);
  EXPECT_NE(error_of([] { hub::parse_hf_ref("a/../b"); }).find("user/repo"), std::string::npos);
  EXPECT_NE(error_of([] { hub::parse_hf_ref("a/b:"); }).find("quant tag"), std::string::npos);
  const hub::HfRef r = hub::parse_hf_ref("ggml-org/Qwen3-0.6B-GGUF:Q8_0");
  EXPECT_EQ(r.repo, "ggml-org/Qwen3-0.6B-GGUF");
  EXPECT_EQ(r.tag, "Q8_0");
}

// Fetched by tag, verified, cached; the second fetch is one HEAD and no GET.
TEST_F(Hub, FetchesByTagAndReusesTheCache) {
  const std::string path = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");
  EXPECT_EQ(path, (dir_ / "hf/user/tiny-GGUF/tiny-Q8_0.gguf").string());
  EXPECT_EQ(read_all(path), hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
  EXPECT_FALSE(fs::exists(path + ".part"));
  EXPECT_EQ(hub_.gets.load(), 1);
  EXPECT_EQ(hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"), path);
  EXPECT_EQ(hub_.gets.load(), 1) << "a current cached file is downloaded again";
  // No tag: Q4_K_M; -hff: that file.
  EXPECT_EQ(fs::path(hub::fetch_hf(opts_, "user/tiny-GGUF")).filename(), "tiny-Q4_K_M.gguf");
  EXPECT_EQ(fs::path(hub::fetch_hf(opts_, "user/tiny-GGUF", "tiny-Q8_0.gguf")).filename(), "tiny-Q8_0.gguf");
}

// The connection drops after half the file, twice: the download resumes
// with Range from where the part ends, and the result is the whole file.
TEST_F(Hub, DroppedTransferResumesWithRange) {
  hub_.drops = 2;
  const std::string path = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");
  EXPECT_EQ(read_all(path), hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
  std::lock_guard<std::mutex> lk(hub_.mu);
  ASSERT_EQ(hub_.ranges.size(), 3u);
  EXPECT_EQ(hub_.ranges[0], "");
  ASSERT_EQ(hub_.ranges[1].rfind("bytes=", 0), 0u) << hub_.ranges[1];
  const long first_cut = std::stol(hub_.ranges[1].substr(6));
  EXPECT_GT(first_cut, 0);
  EXPECT_LT(first_cut, 300000);
  EXPECT_GT(std::stol(hub_.ranges[2].substr(6)), first_cut);
}

// Every attempt is cut: an error naming the URL; the model path never exists
// (the partial file stays as .part for the next run, which resumes it).
TEST_F(Hub, InterruptedDownloadIsNeverTheModel) {
  opts_.retries = 1;
  hub_.drops = 2;
  const std::string e = error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"); });
  EXPECT_NE(e.find("failed after 2 attempts"), std::string::npos) << e;
  EXPECT_NE(e.find("/user/tiny-GGUF/resolve/main/tiny-Q8_0.gguf"), std::string::npos) << e;
  const fs::path model = dir_ / "hf/user/tiny-GGUF/tiny-Q8_0.gguf";
  EXPECT_FALSE(fs::exists(model));
  EXPECT_TRUE(fs::exists(model.string() + ".part"));
  const std::string path = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");  // the next run resumes and completes
  EXPECT_EQ(read_all(path), hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
}

// The bytes do not hash to the announced sha256: refused and removed.
TEST_F(Hub, ChecksumMismatchIsRemoved) {
  hub_.wrong_sha["tiny-Q8_0.gguf"] = std::string(64, 'a');
  const std::string e = error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"); });
  EXPECT_NE(e.find("does not match the server's " + std::string(64, 'a')), std::string::npos) << e;
  const fs::path model = dir_ / "hf/user/tiny-GGUF/tiny-Q8_0.gguf";
  EXPECT_FALSE(fs::exists(model));
  EXPECT_FALSE(fs::exists(model.string() + ".part"));
}

TEST_F(Hub, HttpErrorsNameTheUrlAndStatus) {
  std::string e = error_of([&] { hub::fetch_hf(opts_, "user/missing-GGUF:q8_0"); });
  EXPECT_NE(e.find(hub_.endpoint() + "/api/models/user/missing-GGUF/tree/main"), std::string::npos) << e;
  EXPECT_NE(e.find("HTTP 404"), std::string::npos) << e;
  e = error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF", "nope.gguf"); });
  EXPECT_NE(e.find("resolve/main/nope.gguf answered HTTP 404"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "hf/user/tiny-GGUF/nope.gguf"));
  // A gated repository: 401 without the token (with a hint), fine with it.
  hub_.token = "secret";
  e = error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"); });
  EXPECT_NE(e.find("HTTP 401"), std::string::npos) << e;
  EXPECT_NE(e.find("HF_TOKEN"), std::string::npos) << e;
  opts_.token = "secret";
  EXPECT_TRUE(fs::exists(hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0")));
}

// Offline: the cache answers (tag picking over the cached files); what is not there is an error.
TEST_F(Hub, OfflineUsesTheCache) {
  const std::string path = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");
  hub_.stop();
  opts_.offline = true;
  EXPECT_EQ(hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"), path);
  std::string e = error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q4_k_m"); });
  EXPECT_NE(e.find("no GGUF file for the tag 'q4_k_m'"), std::string::npos) << e;
  e = error_of([&] { hub::fetch_hf(opts_, "user/other-GGUF"); });
  EXPECT_NE(e.find("offline"), std::string::npos) << e;
  // Online but the hub is down: the cached file, with a warning.
  opts_.offline = false;
  EXPECT_EQ(hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"), path);
}

TEST_F(Hub, SplitModelFetchesEveryPart) {
  auto& repo = hub_.repos["user/big-GGUF"];
  repo["big-Q8_0-00001-of-00002.gguf"] = make_content(70000, 4);
  repo["big-Q8_0-00002-of-00002.gguf"] = make_content(50000, 5);
  const std::string path = hub::fetch_hf(opts_, "user/big-GGUF:Q8_0");
  EXPECT_EQ(fs::path(path).filename(), "big-Q8_0-00001-of-00002.gguf");
  EXPECT_EQ(read_all(path), repo["big-Q8_0-00001-of-00002.gguf"]);
  EXPECT_EQ(read_all((dir_ / "hf/user/big-GGUF/big-Q8_0-00002-of-00002.gguf").string()),
            repo["big-Q8_0-00002-of-00002.gguf"]);
}

TEST_F(Hub, ModelUrlIsCachedByUrl) {
  const std::string url = hub_.endpoint() + "/user/tiny-GGUF/resolve/main/tiny-Q4_K_M.gguf";
  const std::string path = hub::fetch_url(opts_, url);
  EXPECT_EQ(read_all(path), hub_.repos["user/tiny-GGUF"]["tiny-Q4_K_M.gguf"]);
  EXPECT_NE(path.find("tiny-Q4_K_M.gguf"), std::string::npos);
  EXPECT_EQ(hub::fetch_url(opts_, url), path);
  EXPECT_EQ(hub_.gets.load(), 1);
  EXPECT_NE(error_of([&] { hub::fetch_url(opts_, "ftp://x/y.gguf"); }).find("http"), std::string::npos);
}

// The opal binary end to end: `opal pull` and `opal run -hf` against the mock
// hub serving stories260K; offline from the cache afterwards; a 404 exits 1
// naming the URL.
TEST_F(Hub, OpalRunByName) {
  hub_.repos["user/stories-GGUF"] = {{"stories260K-F32.gguf", read_file(shared_path("models/stories260K.gguf"))}};
  const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
  std::string out;
  ASSERT_EQ(run_command(env + opal_binary() + " pull user/stories-GGUF:f32", &out), 0) << out;
  const std::string cached = (dir_ / "hf/user/stories-GGUF/stories260K-F32.gguf").string();
  EXPECT_NE(out.find(cached), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_command(env + opal_binary() + " run -hf user/stories-GGUF:f32 -p Once -n 4", &out), 0) << out;
  EXPECT_NE(out.find("generation: 4 tokens"), std::string::npos) << out;
  out.clear();
  hub_.stop();
  ASSERT_EQ(run_command(env + "OPAL_OFFLINE=1 " + opal_binary() + " run -hf user/stories-GGUF -n 2 -p Once", &out), 0)
      << out;
  EXPECT_NE(out.find("generation: 2 tokens"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_command(env + opal_binary() + " run -m x.gguf -hf user/stories-GGUF", &out), 1) << out;
  EXPECT_NE(out.find("give one of -m, -hf and -mu"), std::string::npos) << out;
}

// -hfd end to end: the draft model fetched by name from a hub that wants a token (--hf-token), loaded,
// drafting (the target as its own draft accepts every draft token), and the text equal to plain decoding.
TEST_F(Hub, DraftModelByNameSpeculates) {
  hub_.repos["user/stories-GGUF"] = {{"stories260K-F32.gguf", read_file(shared_path("models/stories260K.gguf"))}};
  hub_.token = "hf_test_token";
  const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
  const std::string err = (dir_ / "stderr.txt").string();
  fs::create_directories(dir_);
  const std::string args = " run -m " + shared_path("models/stories260K.gguf") + " -p Once -n 48 --temp 0 -t 1 -c 256";
  std::string plain, spec, out;
  ASSERT_EQ(run_command("(" + opal_binary() + args + " 2>" + err + ")", &plain), 0) << plain;
  // Without the token the hub answers 401: the error names the URL and the status.
  EXPECT_EQ(run_command(env + opal_binary() + args + " -hfd user/stories-GGUF:f32", &out), 1) << out;
  EXPECT_NE(out.find("answered HTTP 401"), std::string::npos) << out;
  ASSERT_EQ(run_command("(" + env + opal_binary() + args +
                            " -hfd user/stories-GGUF:f32 --hf-token hf_test_token --draft-p-min 0 2>" + err + ")",
                        &spec),
            0)
      << spec << read_all(err);
  EXPECT_EQ(spec, plain);
  const std::string log = read_all(err);
  EXPECT_NE(log.find("opal: draft model:"), std::string::npos) << log;
  const size_t at = log.find("speculative: draft: ");
  ASSERT_NE(at, std::string::npos) << log;
  int drafted = 0, accepted = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at, "speculative: draft: %d drafted, %d accepted", &drafted, &accepted), 2)
      << log;
  EXPECT_GT(drafted, 20);
  EXPECT_EQ(accepted, drafted);
  EXPECT_EQ(read_all((dir_ / "hf/user/stories-GGUF/stories260K-F32.gguf").string()),
            hub_.repos["user/stories-GGUF"]["stories260K-F32.gguf"]);
  // HF_TOKEN serves as well, and -hf takes --hf-token too.
  out.clear();
  EXPECT_EQ(run_command(env + "HF_TOKEN=hf_test_token " + opal_binary() + args + " -hfd user/stories-GGUF:f32", &out),
            0)
      << out;
  out.clear();
  EXPECT_EQ(
      run_command(env + opal_binary() + " run -hf user/stories-GGUF:f32 --hf-token hf_test_token -p Once -n 2", &out),
      0)
      << out;
}

TEST_F(Hub, OpalPullErrorNamesUrlAndStatus) {
  const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
  std::string out;
  EXPECT_EQ(run_command(env + opal_binary() + " pull -hf user/none-GGUF:q8_0", &out), 1) << out;
  EXPECT_NE(out.find("/api/models/user/none-GGUF/tree/main?recursive=true answered HTTP 404"), std::string::npos)
      << out;
}

// Two processes fetching the same file take turns: while another holds the
// download lock (here: this test process), `opal pull` says which pid it waits
// for, then finds the file the other downloaded and fetches nothing.
TEST_F(Hub, SecondDownloaderWaitsForTheFirst) {
  const fs::path model = dir_ / "hf/user/tiny-GGUF/tiny-Q8_0.gguf";
  fs::create_directories(model.parent_path());
  const int fd = ::open((model.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const std::string me = std::to_string(::getpid());
  ASSERT_EQ(::pwrite(fd, me.data(), me.size(), 0), ssize_t(me.size()));
  std::string out;
  std::atomic<bool> done{false};
  int rc = -1;
  std::thread second([&] {
    const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
    rc = run_command(env + opal_binary() + " pull user/tiny-GGUF:q8_0", &out);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(done.load()) << "the second downloader did not wait: " << out;
  EXPECT_EQ(hub_.gets.load(), 0);
  // The first finishes its download (here: the test writes the file and its .etag as download() does) and
  // lets go.
  {
    std::ofstream(model, std::ios::binary) << hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"];
    std::ofstream(model.string() + ".etag") << sha256_hex(hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
  }
  ::close(fd);
  second.join();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("being downloaded by pid " + me), std::string::npos) << out;
  EXPECT_EQ(hub_.gets.load(), 0) << "the waiting process downloaded the file again";
  EXPECT_EQ(read_all(model.string()), hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
}

// A split model by name: every part fetched, and the model loads from all of them.
TEST_F(Hub, SplitModelByNameRuns) {
  const std::string dir = temp_dir() + "/hub_split";
  fs::create_directories(dir);
  std::string out;
  const std::string split =
      opal_binary() + " split " + shared_path("models/stories260K.gguf") + " " + dir + "/stories260K-F32 --parts 2";
  ASSERT_EQ(run_command(split, &out), 0) << out;
  auto& repo = hub_.repos["user/split-GGUF"];
  repo["stories260K-F32-00001-of-00002.gguf"] = read_file(dir + "/stories260K-F32-00001-of-00002.gguf");
  repo["stories260K-F32-00002-of-00002.gguf"] = read_file(dir + "/stories260K-F32-00002-of-00002.gguf");
  const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
  out.clear();
  ASSERT_EQ(run_command(env + opal_binary() + " run -hf user/split-GGUF:f32 -p Once -n 4 --temp 0", &out), 0) << out;
  EXPECT_NE(out.find("generation: 4 tokens"), std::string::npos) << out;
}

// -hffd picks the draft's file in -hfd's repository, and --hf-revision applies to -hfd: the draft comes from
// that revision (cached apart from main's) and speculates.
TEST_F(Hub, DraftFileAndRevisionByName) {
  const std::string stories = read_file(shared_path("models/stories260K.gguf"));
  hub_.repos["user/draft-GGUF@v2"] = {{"draft-model.gguf", stories}, {"other-F32.gguf", stories}};
  hub_.repos["user/draft-GGUF"] = {{"unrelated-F32.gguf", stories}};
  const std::string env = "HF_ENDPOINT=" + hub_.endpoint() + " OPAL_CACHE=" + dir_.string() + " ";
  const std::string err = (dir_ / "stderr.txt").string();
  fs::create_directories(dir_);
  const std::string args = " run -m " + shared_path("models/stories260K.gguf") + " -p Once -n 32 --temp 0 -t 1 -c 256";
  std::string plain, spec, out;
  ASSERT_EQ(run_command("(" + opal_binary() + args + " 2>" + err + ")", &plain), 0) << plain;
  ASSERT_EQ(
      run_command("(" + env + opal_binary() + args +
                      " -hfd user/draft-GGUF -hffd draft-model.gguf --hf-revision v2 --draft-p-min 0 2>" + err + ")",
                  &spec),
      0)
      << spec << read_all(err);
  EXPECT_EQ(spec, plain);
  EXPECT_NE(read_all(err).find("speculative: draft: "), std::string::npos) << read_all(err);
  EXPECT_EQ(read_all((dir_ / "hf/user/draft-GGUF@v2/draft-model.gguf").string()), stories);
  EXPECT_FALSE(fs::exists(dir_ / "hf/user/draft-GGUF@v2/other-F32.gguf"));
  // Without --hf-revision the file is looked for in main, which lacks it: the error names it.
  EXPECT_EQ(run_command(env + opal_binary() + args + " -hfd user/draft-GGUF -hffd draft-model.gguf", &out), 1) << out;
  EXPECT_NE(out.find("draft-model.gguf"), std::string::npos) << out;
  // -hffd without -hfd, and --hf-revision with neither -hf nor -hfd, are refused naming the flags.
  out.clear();
  EXPECT_EQ(run_command(env + opal_binary() + args + " -hffd draft-model.gguf", &out), 1) << out;
  EXPECT_NE(out.find("-hffd names a file of the repository -hfd names"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_command(env + opal_binary() + args + " --hf-revision v2", &out), 1) << out;
  EXPECT_NE(out.find("--hf-revision names a revision of the -hf (or -hfd) repository"), std::string::npos) << out;
}

// --hf-revision: the tree and resolve URLs name it, and its files are cached apart from main's.
TEST_F(Hub, RevisionOtherThanMain) {
  hub_.repos["user/tiny-GGUF@v2"] = {{"tiny-Q8_0.gguf", make_content(1000, 9)}};
  opts_.revision = "v2";
  const std::string v2 = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");
  EXPECT_EQ(v2, (dir_ / "hf/user/tiny-GGUF@v2/tiny-Q8_0.gguf").string());
  EXPECT_EQ(read_all(v2), hub_.repos["user/tiny-GGUF@v2"]["tiny-Q8_0.gguf"]);
  opts_.revision = "main";
  const std::string main = hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0");
  EXPECT_NE(main, v2);
  EXPECT_EQ(read_all(main), hub_.repos["user/tiny-GGUF"]["tiny-Q8_0.gguf"]);
  opts_.revision = "v3";
  EXPECT_NE(error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"); }).find("/tree/v3"), std::string::npos);
  opts_.revision = "../x";
  EXPECT_NE(error_of([&] { hub::fetch_hf(opts_, "user/tiny-GGUF:q8_0"); }).find("--hf-revision"), std::string::npos);
}

}  // namespace
}  // namespace opal::test
