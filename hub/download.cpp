// Downloads with libcurl into the cache: HEAD for what the server announces
// (size and sha256: X-Linked-Size / X-Linked-Etag as the Hugging Face hub
// sends them on the resolve URL's redirect, else Content-Length / ETag),
// then GET into `<dest>.part`, resumed with `Range: bytes=N-` while the ETag
// recorded beside the part (`<dest>.part.etag`) still matches; a 200 answer
// to a Range request restarts the file. The part is renamed to `dest` only
// after its size and sha256 check out; a mismatch deletes it. `<dest>.etag`
// remembers which version a complete file is, so a later run finds it
// current with one HEAD (or none, offline). Processes sharing a cache take
// turns on a file: `<dest>.lock` is locked (flock) for the whole check and
// download and holds the owner's pid, so a second process says which pid it
// waits for, then finds the file current.
#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"
#include "hub/http.h"
#include "hub/hub.h"

namespace opal::hub {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  const std::string v = env(name);
  return v == "1" || v == "true" || v == "TRUE" || v == "yes" || v == "ON" || v == "on";
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// ETag values as sent: `W/"abc"` or `"abc"` -> abc.
std::string clean_etag(std::string e) {
  e = trim(e);
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(uint8_t(c)); });
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

class Easy {
 public:
  Easy(const HubOptions& o, const std::string& url) {
    curl_init_once();
    h_ = curl_easy_init();
    if (!h_) fail("libcurl could not start a transfer for {}", url);
    curl_easy_setopt(h_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h_, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h_, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h_, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h_, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled transfer fails after 60 s
    curl_easy_setopt(h_, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h_, CURLOPT_USERAGENT, "opal");
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    // A custom Authorization header is not sent on to another host after a redirect (curl >= 7.58).
    if (!o.token.empty()) headers_ = curl_slist_append(headers_, ("Authorization: Bearer " + o.token).c_str());
    if (headers_) curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(h_, CURLOPT_ERRORBUFFER, err_);
    curl_easy_setopt(h_, CURLOPT_HEADERFUNCTION, &Easy::on_header);
    curl_easy_setopt(h_, CURLOPT_HEADERDATA, this);
  }
  ~Easy() {
    curl_easy_cleanup(h_);
    curl_slist_free_all(headers_);
  }
  Easy(const Easy&) = delete;
  Easy& operator=(const Easy&) = delete;
  CURL* get() { return h_; }
  // Runs the transfer; returns curl's code (its message in error()).
  CURLcode perform() {
    err_[0] = 0;
    return curl_easy_perform(h_);
  }
  std::string error(CURLcode c) const { return err_[0] ? std::string(err_) : std::string(curl_easy_strerror(c)); }
  long status() {
    long s = 0;
    curl_easy_getinfo(h_, CURLINFO_RESPONSE_CODE, &s);
    return s;
  }
  // A header of the last response (lower-case name), or of any response for the x-linked-* ones.
  std::string header(const std::string& name) const {
    for (const auto& [k, v] : last_)
      if (k == name) return v;
    for (const auto& [k, v] : linked_)
      if (k == name) return v;
    return {};
  }

 private:
  static size_t on_header(char* buf, size_t size, size_t n, void* ud) {
    auto* self = static_cast<Easy*>(ud);
    const std::string line(buf, size * n);
    if (line.rfind("HTTP/", 0) == 0) {
      self->last_.clear();  // a new response (after a redirect)
      return size * n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return size * n;
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string value = trim(line.substr(colon + 1));
    self->last_.emplace_back(name, value);
    if (name.rfind("x-linked-", 0) == 0) self->linked_.emplace_back(name, value);
    return size * n;
  }

  CURL* h_ = nullptr;
  curl_slist* headers_ = nullptr;
  char err_[CURL_ERROR_SIZE] = {};
  std::vector<std::pair<std::string, std::string>> last_, linked_;
};

std::string read_small(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

void write_small(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::trunc);
  f << s << "\n";
  if (!f) fail("cannot write {}", path);
}

std::string human(double bytes) {
  const char* unit[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  return fmt::format("{:.1f} {}", bytes, unit[u]);
}

// The progress bar: one line on stderr, redrawn at most 5 times a second
// (a terminal), or a line per 10 % (a log).
struct Progress {
  std::string name;
  uint64_t offset = 0;  // bytes there before this transfer (resume)
  bool enabled = true, tty = false;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(), last;
  int last_decile = -1;
  void draw(uint64_t now_bytes, uint64_t total, bool final) {
    if (!enabled) return;
    const auto t = std::chrono::steady_clock::now();
    if (!final && tty && t - last < std::chrono::milliseconds(200)) return;
    const double secs = std::chrono::duration<double>(t - t0).count();
    const double rate = secs > 0 ? double(now_bytes - offset) / secs : 0;
    const double frac = total ? double(now_bytes) / double(total) : 0;
    if (!tty) {
      const int decile = int(frac * 10);
      if (decile == last_decile) return;
      last_decile = decile;
    }
    last = t;
    std::string bar;
    if (total) {
      const int w = 30, fill = int(frac * w);
      bar = fmt::format("[{}{}] {:5.1f}% {} / {}", std::string(size_t(fill), '#'), std::string(size_t(w - fill), ' '),
                        100 * frac, human(double(now_bytes)), human(double(total)));
    } else {
      bar = human(double(now_bytes));
    }
    std::fprintf(stderr, "%s%s %s %s/s%s", tty ? "\r" : "", name.c_str(), bar.c_str(), human(rate).c_str(),
                 tty && !final ? "" : "\n");
    std::fflush(stderr);
  }
};

struct GetState {
  std::FILE* f = nullptr;
  Easy* easy = nullptr;
  uint64_t offset = 0;     // bytes in the part before this request
  uint64_t written = 0;    // bytes written by this request
  bool started = false;    // the first body byte arrived
  bool restarted = false;  // the server ignored the Range: the part was truncated
  long status = 0;
  std::string error_body;  // the start of an error response's body
  Progress* progress = nullptr;
  uint64_t total = 0;
};

size_t on_body(char* data, size_t size, size_t n, void* ud) {
  auto* st = static_cast<GetState*>(ud);
  const size_t len = size * n;
  if (!st->started) {
    st->started = true;
    st->status = st->easy->status();
    if (st->status == 200 && st->offset > 0) {  // Range ignored: start over
      if (std::fflush(st->f) != 0 || ftruncate(fileno(st->f), 0) != 0 || std::fseek(st->f, 0, SEEK_SET) != 0) return 0;
      st->offset = 0;
      st->restarted = true;
    }
  }
  if (st->status >= 400) {
    if (st->error_body.size() < 512) st->error_body.append(data, std::min(len, 512 - st->error_body.size()));
    return len;
  }
  if (std::fwrite(data, 1, len, st->f) != len) return 0;
  st->written += len;
  return len;
}

int on_xfer(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* st = static_cast<GetState*>(ud);
  if (st->progress && st->status < 400) st->progress->draw(st->offset + st->written, st->total, false);
  return 0;
}

uint64_t file_size_or_zero(const std::string& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : uint64_t(n);
}

std::string status_hint(long status) {
  if (status == 401 || status == 403) return " (a gated or private repository needs HF_TOKEN)";
  if (status == 404) return " (no such repository or file)";
  return "";
}

}  // namespace

HubOptions HubOptions::from_env() {
  HubOptions o;
  if (std::string e = env("HF_ENDPOINT"); !e.empty()) o.endpoint = e;
  else if (std::string m = env("MODEL_ENDPOINT"); !m.empty()) o.endpoint = m;
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  o.token = env("HF_TOKEN");
  if (std::string c = env("OPAL_CACHE"); !c.empty()) o.cache_dir = c;
  else if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) o.cache_dir = x + "/opal";
  else if (std::string h = env("HOME"); !h.empty()) o.cache_dir = h + "/.cache/opal";
  else o.cache_dir = ".cache/opal";
  o.offline = env_true("OPAL_OFFLINE") || env_true("HF_HUB_OFFLINE");
  return o;
}

RemoteFile head(const HubOptions& o, const std::string& url) {
  Easy e(o, url);
  curl_easy_setopt(e.get(), CURLOPT_NOBODY, 1L);
  const CURLcode c = e.perform();
  if (c != CURLE_OK) fail("cannot reach {}: {}", url, e.error(c));
  RemoteFile r;
  r.status = e.status();
  std::string etag = e.header("x-linked-etag");
  if (etag.empty()) etag = e.header("etag");
  r.etag = clean_etag(etag);
  if (is_sha256(lower(r.etag))) r.sha256 = lower(r.etag);
  std::string size = e.header("x-linked-size");
  if (size.empty()) size = e.header("content-length");
  if (!size.empty()) r.size = std::strtoull(size.c_str(), nullptr, 10);
  return r;
}

std::string get_text(const HubOptions& o, const std::string& url) {
  Easy e(o, url);
  std::string body;
  curl_easy_setopt(
      e.get(), CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* ud) {
        auto* b = static_cast<std::string*>(ud);
        if (b->size() + s * n > (size_t(64) << 20)) return size_t(0);  // a file list, not a model
        b->append(d, s * n);
        return s * n;
      });
  curl_easy_setopt(e.get(), CURLOPT_WRITEDATA, &body);
  const CURLcode c = e.perform();
  if (c != CURLE_OK) fail("cannot fetch {}: {}", url, e.error(c));
  const long status = e.status();
  if (status >= 400) fail("{} answered HTTP {}{}", url, status, status_hint(status));
  return body;
}

std::string sha256_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open {} to check it", path);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(size_t(1) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx, buf.data(), n);
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (read_error) fail("cannot read {} to check it", path);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

// An exclusive flock on `<dest>.lock` for this process's check and download of dest (released on destruction,
// or by the kernel when the process dies). When another process holds it, says so with its pid and waits.
class DownloadLock {
 public:
  explicit DownloadLock(const std::string& dest) : path_(dest + ".lock") {
    fs::create_directories(fs::path(dest).parent_path());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the download lock {}", path_);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
      const std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("?");
      std::fprintf(stderr, "%s is being downloaded by pid %s; waiting for it\n", dest.c_str(), pid.c_str());
      while (::flock(fd_, LOCK_EX) != 0)
        if (errno != EINTR) fail("cannot lock {}", path_);
    }
    const std::string me = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
      fail("cannot write the download lock {}", path_);
  }
  ~DownloadLock() { ::close(fd_); }  // releases the lock (the pid stays; it is read only while the lock is held)
  DownloadLock(const DownloadLock&) = delete;
  DownloadLock& operator=(const DownloadLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

std::string download(const HubOptions& o, const std::string& url, const std::string& dest) {
  const std::string part = dest + ".part", part_tag = dest + ".part.etag", done_tag = dest + ".etag";
  if (o.offline) {
    if (fs::exists(dest)) return dest;
    fail("offline (OPAL_OFFLINE / HF_HUB_OFFLINE): {} is not in the cache ({})", url, dest);
  }
  const DownloadLock lock(dest);  // after a wait, the other process's download is found below
  const bool have = fs::exists(dest);
  RemoteFile r;
  try {
    r = head(o, url);
  } catch (const Error& e) {
    if (!have) throw;
    std::fprintf(stderr, "warning: %s; using the cached %s\n", e.what(), dest.c_str());
    return dest;
  }
  if (r.status >= 400) fail("{} answered HTTP {}{}", url, r.status, status_hint(r.status));
  if (have && !r.etag.empty() && read_small(done_tag) == r.etag) return dest;  // current
  if (have && r.etag.empty() && r.size && file_size_or_zero(dest) == r.size) return dest;

  fs::create_directories(fs::path(dest).parent_path());
  if (fs::exists(part) && (r.etag.empty() || read_small(part_tag) != r.etag)) fs::remove(part);  // another version
  if (!r.etag.empty()) write_small(part_tag, r.etag);
  Progress progress;
  progress.name = fs::path(dest).filename().string();
  progress.enabled = o.progress;
  progress.tty = isatty(2) != 0;
  std::string last_error;
  bool complete = false;
  for (int attempt = 0; attempt <= o.retries && !complete; ++attempt) {
    const uint64_t offset = file_size_or_zero(part);
    if (r.size && offset == r.size) {
      complete = true;
      break;
    }
    std::FILE* f = std::fopen(part.c_str(), offset ? "r+b" : "wb");
    if (!f) fail("cannot write {}", part);
    std::fseek(f, 0, SEEK_END);
    Easy e(o, url);
    GetState st;
    st.f = f;
    st.easy = &e;
    st.offset = offset;
    st.progress = &progress;
    st.total = r.size;
    progress.offset = offset;
    const std::string range = fmt::format("{}-", offset);
    if (offset) curl_easy_setopt(e.get(), CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(e.get(), CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(e.get(), CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(e.get(), CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e.get(), CURLOPT_XFERINFOFUNCTION, &on_xfer);
    curl_easy_setopt(e.get(), CURLOPT_XFERINFODATA, &st);
    const CURLcode c = e.perform();
    const bool closed_ok = std::fclose(f) == 0;
    const long status = st.started ? st.status : e.status();
    if (status == 416) {  // the part is not a prefix of this file: start over
      fs::remove(part);
      last_error = "HTTP 416 for the resumed range";
      continue;
    }
    if (status >= 400) {
      fs::remove(part);
      fs::remove(part_tag);
      fail("{} answered HTTP {}{}", url, status, status_hint(status));
    }
    if (c == CURLE_OK && closed_ok) {
      complete = true;
      progress.draw(offset + st.written, r.size, true);
      break;
    }
    last_error = c != CURLE_OK ? e.error(c) : fmt::format("cannot write {}", part);
    if (o.progress)
      std::fprintf(stderr, "\n%s: transfer cut at %llu bytes (%s); resuming\n", progress.name.c_str(),
                   static_cast<unsigned long long>(file_size_or_zero(part)), last_error.c_str());
  }
  if (!complete)
    fail("downloading {} failed after {} attempts: {} (the partial file {} is kept for the next try)", url,
         o.retries + 1, last_error, part);
  const uint64_t got = file_size_or_zero(part);
  if (r.size && got != r.size) {
    fs::remove(part);
    fs::remove(part_tag);
    fail("downloading {} gave {} bytes, the server announced {}; the download was removed", url, got, r.size);
  }
  if (!r.sha256.empty()) {
    const std::string sum = sha256_file(part);
    if (sum != r.sha256) {
      fs::remove(part);
      fs::remove(part_tag);
      fail("downloading {}: sha256 {} does not match the server's {}; the download was removed", url, sum, r.sha256);
    }
  }
  fs::rename(part, dest);
  fs::remove(part_tag);
  if (!r.etag.empty()) write_small(done_tag, r.etag);
  else fs::remove(done_tag);
  return dest;
}

}  // namespace opal::hub
