// The chat page's routes: GET / and GET /* serve the bundled files (or, with
// --path DIR, the files of DIR) with Content-Type, ETag / If-None-Match (304),
// Cache-Control: no-cache (the browser revalidates, the answer is a 304 when
// nothing changed), gzip when the client accepts it, and a Content-Security-Policy
// that lets the page load only its own files and talk only to this server.
// A client asking `/` for JSON (Accept: application/json, no text/html) gets a
// short description of the server instead of the page.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/version.h"
#include "server/state.h"
#include "server/webui.h"

namespace opal::server {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

// Calls f(item) for each comma-separated item of a header value, trimmed.
template <class F>
void for_each_item(std::string_view list, F f) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    f(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

// An Accept-style item "name;q=0.5;x=y": its name, and whether its q is zero.
std::string_view item_name(std::string_view item, bool* q_zero) {
  const size_t semi = item.find(';');
  *q_zero = false;
  std::string_view params = semi == std::string_view::npos ? std::string_view{} : item.substr(semi + 1);
  while (!params.empty()) {
    const size_t next = params.find(';');
    std::string_view p = trim(params.substr(0, next));
    if (p.size() >= 2 && lower(p[0]) == 'q' && p[1] == '=') {
      std::string_view v = trim(p.substr(2));
      *q_zero = !v.empty() && v.find_first_not_of("0.") == std::string_view::npos;
    }
    if (next == std::string_view::npos) break;
    params.remove_prefix(next + 1);
  }
  return trim(item.substr(0, semi));
}

bool accepts_type(std::string_view accept, std::string_view type) {
  bool yes = false;
  for_each_item(accept, [&](std::string_view item) {
    bool q_zero = false;
    if (iequal(item_name(item, &q_zero), type) && !q_zero) yes = true;
  });
  return yes;
}

}  // namespace

const WebAsset* find_bundled(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& a : bundled_webui())
    if (a.path == path) return &a;
  return nullptr;
}

std::string_view content_type_for(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || name.find('/', dot) != std::string_view::npos) return {};
  const std::string_view ext = name.substr(dot);
  struct Type {
    std::string_view ext, type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
      {".txt", "text/plain; charset=utf-8"},
      {".map", "application/json"},
  };
  for (const Type& t : kTypes)
    if (iequal(t.ext, ext)) return t.type;
  return {};
}

bool accepts_gzip(std::string_view accept_encoding) {
  bool yes = false;
  for_each_item(accept_encoding, [&](std::string_view item) {
    bool q_zero = false;
    const std::string_view name = item_name(item, &q_zero);
    if ((iequal(name, "gzip") || iequal(name, "x-gzip") || name == "*") && !q_zero) yes = true;
    if (iequal(name, "gzip") && q_zero) yes = false;  // an explicit refusal wins over "*"
  });
  return yes;
}

bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  if (trim(if_none_match) == "*") return true;
  bool yes = false;
  for_each_item(if_none_match, [&](std::string_view tag) {
    if (tag.size() > 2 && (tag[0] == 'W' || tag[0] == 'w') && tag[1] == '/') tag.remove_prefix(2);
    if (tag == etag) yes = true;
  });
  return yes;
}

bool prefers_json(std::string_view accept) {
  return accepts_type(accept, "application/json") && !accepts_type(accept, "text/html");
}

namespace {

[[noreturn]] void not_found(const HttpRequest& req) {
  throw HttpError(404, "not_found_error", fmt::format("no route for {} {}", req.method, req.path));
}

void common_headers(HttpResponse& res, std::string_view content_type) {
  res.set_header("X-Content-Type-Options", "nosniff");
  if (content_type.starts_with("text/html"))
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                   "frame-ancestors 'self'");
}

// `/` for an API client: what this is and where to go.
void describe_server(const Server::State& st, HttpResponse& res) {
  json j;
  j["name"] = "opal";
  j["version"] = git_commit();
  j["status"] = st.ready ? "ok" : "loading";
  j["model"] = st.ready ? json(st.model_id) : json(nullptr);
  j["webui"] = "open this address in a browser for the chat page";
  j["endpoints"] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/completion", "/health", "/props"};
  res.set_content(dump(j), "application/json");
}

void serve_bundled(const HttpRequest& req, HttpResponse& res) {
  const WebAsset* a = find_bundled(req.path);
  if (!a) not_found(req);
  common_headers(res, a->content_type);
  res.set_header("ETag", std::string(a->etag));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Vary", "Accept-Encoding");
  if (etag_matches(req.get_header_value("If-None-Match"), a->etag)) {
    res.status = 304;
    return;
  }
  if (!a->gzip.empty() && accepts_gzip(req.get_header_value("Accept-Encoding"))) {
    res.set_header("Content-Encoding", "gzip");
    res.set_content(std::string(a->gzip), std::string(a->content_type));
  } else {
    res.set_content(std::string(a->data), std::string(a->content_type));
  }
}

// --path DIR: the file under DIR named by the URL path, read at each request (for
// working on the page without rebuilding). Paths that leave DIR are refused.
void serve_directory(const std::string& dir, const HttpRequest& req, HttpResponse& res) {
  namespace fs = std::filesystem;
  std::string rel = req.path == "/" ? std::string("index.html") : req.path.substr(1);
  if (rel.empty() || rel.find('\0') != std::string::npos || rel.find('\\') != std::string::npos) not_found(req);
  for (const auto& part : fs::path(rel))
    if (part == ".." || part == ".") not_found(req);
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) throw HttpError(500, "server_error", fmt::format("--path {}: {}", dir, ec.message()));
  const fs::path file = fs::weakly_canonical(root / rel, ec);
  if (ec || !fs::is_regular_file(file, ec)) not_found(req);
  if (std::mismatch(root.begin(), root.end(), file.begin(), file.end()).first != root.end())
    not_found(req);  // a link out of DIR
  const std::string_view type = content_type_for(file.filename().native());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw HttpError(500, "server_error", fmt::format("cannot read {}", file.native()));
  std::string body((std::istreambuf_iterator<char>(in)), {});
  common_headers(res, type);
  res.set_header("Cache-Control", "no-store");
  res.set_content(std::move(body), type.empty() ? "application/octet-stream" : std::string(type));
}

}  // namespace

bool webui_serves(const Server::State& st, const HttpRequest& req) {
  if (!st.opts.webui || (req.method != "GET" && req.method != "HEAD")) return false;
  if (req.path == "/") return true;
  if (!st.opts.webui_path.empty()) return !content_type_for(req.path).empty();
  return find_bundled(req.path) != nullptr;
}

void register_webui_routes(Server::State& st) {
  if (!st.opts.webui) return;
  const Dispatch d = st.opts.webui_path.empty() ? Dispatch::Inline : Dispatch::Worker;  // memory, or file reads
  auto handler = [&st](const HttpRequest& req, HttpResponse& res) {
    if (req.path == "/" && prefers_json(req.get_header_value("Accept"))) return describe_server(st, res);
    if (st.opts.webui_path.empty()) serve_bundled(req, res);
    else serve_directory(st.opts.webui_path, req, res);
  };
  st.http.Get("/", handler, d);
  st.http.Get("/*", handler, d);
}

}  // namespace opal::server
