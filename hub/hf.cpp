// Hugging Face names: `user/repo[:tag]` -> the repository's file list (tree
// API) -> the GGUF file(s) the tag picks -> resolve URLs -> the cache
// (<cache>/hf/<user>/<repo>/<file>). Offline, or when the hub cannot be
// reached, the same pick runs over the files already complete in the cache.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "hub/http.h"
#include "hub/hub.h"

namespace opal::hub {

namespace fs = std::filesystem;

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `tag` appears in `name` as a whole word (letters, digits and '_' around it do not continue it).
bool has_tag(const std::string& name, const std::string& tag) {
  const std::string n = upper(name), t = upper(tag);
  for (size_t at = n.find(t); at != std::string::npos; at = n.find(t, at + 1)) {
    const bool left = at == 0 || !word_char(n[at - 1]);
    const bool right = at + t.size() == n.size() || !word_char(n[at + t.size()]);
    if (left && right) return true;
  }
  return false;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A split model's part name, "<stem>-00001-of-00003.gguf" (any case): its stem
// and the part count as written ("00003"); nullopt for any other name.
struct SplitName {
  std::string stem, count;
};
std::optional<SplitName> split_name(const std::string& file) {
  constexpr std::string_view tail = "-nnnnn-of-nnnnn.gguf";
  if (file.size() < tail.size()) return std::nullopt;
  const size_t at = file.size() - tail.size();
  for (size_t i = 0; i < tail.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(file[at + i]);
    const bool ok = tail[i] == 'n' ? std::isdigit(c) != 0 : std::tolower(c) == tail[i];
    if (!ok) return std::nullopt;
  }
  return SplitName{file.substr(0, at), file.substr(at + 10, 5)};
}

bool valid_name_part(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// The revision checked (letters, digits, . _ - and / between names), as it goes into a URL ('/' as %2F).
std::string revision_in_url(const std::string& rev) {
  bool ok = !rev.empty() && rev.front() != '/' && rev.back() != '/' && rev.find("..") == std::string::npos;
  for (char c : rev)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/');
  if (!ok) fail("--hf-revision '{}': a branch, tag or commit name is expected", rev);
  std::string out;
  for (char c : rev) out += c == '/' ? std::string("%2F") : std::string(1, c);
  return out;
}

std::string repo_dir(const HubOptions& o, const std::string& repo) {
  if (o.revision == "main") return o.cache_dir + "/hf/" + repo;
  std::string rev = o.revision;
  for (size_t at = rev.find('/'); at != std::string::npos; at = rev.find('/', at + 2)) rev.replace(at, 1, "--");
  return o.cache_dir + "/hf/" + repo + "@" + rev;
}

// Every part of the split model `file` belongs to (just `file` when it is not split).
std::vector<std::string> with_parts(const std::string& file) {
  const std::optional<SplitName> split = split_name(file);
  if (!split) return {file};
  const int n = std::stoi(split->count);
  std::vector<std::string> parts;
  for (int k = 1; k <= n; ++k) parts.push_back(fmt::format("{}-{:05d}-of-{}.gguf", split->stem, k, split->count));
  return parts;
}

// Complete GGUF files of a repository in the cache (relative paths).
std::vector<std::string> cached_files(const HubOptions& o, const std::string& repo) {
  std::vector<std::string> out;
  const fs::path dir = repo_dir(o, repo);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); ++it)
    if (it->is_regular_file() && it->path().extension() == ".gguf")
      out.push_back(fs::relative(it->path(), dir).generic_string());
  return out;
}

}  // namespace

HfRef parse_hf_ref(const std::string& spec) {
  HfRef r;
  const size_t colon = spec.find(':');
  r.repo = spec.substr(0, colon);
  if (colon != std::string::npos) r.tag = spec.substr(colon + 1);
  const size_t slash = r.repo.find('/');
  if (slash == std::string::npos || !valid_name_part(r.repo.substr(0, slash)) ||
      !valid_name_part(r.repo.substr(slash + 1)))
    fail("-hf '{}': expected user/repo[:quant], e.g. ggml-org/Qwen3-0.6B-GGUF:q8_0", spec);
  if (colon != std::string::npos && !valid_name_part(r.tag))
    fail("-hf '{}': the quant tag after ':' is empty or odd", spec);
  return r;
}

std::vector<std::string> pick_gguf(const std::vector<std::string>& files, const std::string& tag) {
  std::vector<std::string> gguf;
  for (const std::string& f : files) {
    const std::string b = upper(base_name(f));
    if (b.size() > 5 && b.compare(b.size() - 5, 5, ".GGUF") == 0 && b.find("MMPROJ") == std::string::npos)
      gguf.push_back(f);
  }
  std::sort(gguf.begin(), gguf.end());
  if (gguf.empty()) fail("the repository has no GGUF file");
  std::vector<std::string> tags = tag.empty() ? std::vector<std::string>{"Q4_K_M", "Q8_0"} : std::vector{tag};
  std::vector<std::string> matched;
  for (const std::string& t : tags) {
    for (const std::string& f : gguf)
      if (has_tag(base_name(f), t)) matched.push_back(f);
    if (!matched.empty()) break;
  }
  if (matched.empty()) {
    if (!tag.empty()) {
      std::string list;
      for (const std::string& f : gguf) list += (list.empty() ? "" : ", ") + f;
      fail("no GGUF file for the tag '{}'; the repository has: {}", tag, list);
    }
    matched.push_back(gguf.front());
  }
  // A single file first; else the first split model, with every part.
  for (const std::string& f : matched)
    if (!split_name(f)) return {f};
  std::vector<std::string> parts = with_parts(matched.front());
  std::vector<std::string> missing;
  for (const std::string& p : parts)
    if (std::find(files.begin(), files.end(), p) == files.end()) missing.push_back(p);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail("the split model {} lacks parts: {}", matched.front(), list);
  }
  return parts;
}

std::vector<std::string> list_repo_files(const HubOptions& o, const std::string& repo) {
  const std::string url =
      o.endpoint + "/api/models/" + repo + "/tree/" + revision_in_url(o.revision) + "?recursive=true";
  const std::string text = get_text(o, url);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("{}: the file list is not JSON ({})", url, e.what());
  }
  if (!j.is_array()) fail("{}: the file list is not a JSON array", url);
  std::vector<std::string> out;
  for (const auto& e : j)
    if (e.is_object() && e.value("type", "") == "file" && e.contains("path") && e["path"].is_string())
      out.push_back(e["path"].get<std::string>());
  return out;
}

std::string fetch_hf(const HubOptions& o, const std::string& spec, const std::string& file) {
  const HfRef ref = parse_hf_ref(spec);
  if (!file.empty() && (file.find("..") != std::string::npos || file.front() == '/'))
    fail("-hff '{}': a path inside the repository is expected", file);
  std::vector<std::string> files;
  if (!file.empty()) {
    files = with_parts(file);
  } else if (o.offline) {
    const auto cached = cached_files(o, ref.repo);
    if (cached.empty()) fail("offline: nothing of {} is in the cache ({})", ref.repo, repo_dir(o, ref.repo));
    files = pick_gguf(cached, ref.tag);
  } else {
    try {
      files = pick_gguf(list_repo_files(o, ref.repo), ref.tag);
    } catch (const Error& e) {
      const auto cached = cached_files(o, ref.repo);
      if (cached.empty()) throw;
      files = pick_gguf(cached, ref.tag);
      std::fprintf(stderr, "warning: %s; using the cached %s\n", e.what(), files.front().c_str());
    }
  }
  std::string first;
  for (const std::string& f : files) {
    const std::string path =
        download(o, o.endpoint + "/" + ref.repo + "/resolve/" + revision_in_url(o.revision) + "/" + f,
                 repo_dir(o, ref.repo) + "/" + f);
    if (first.empty()) first = path;
  }
  return first;
}

std::string fetch_url(const HubOptions& o, const std::string& url) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    fail("-mu '{}': an http:// or https:// URL is expected", url);
  std::string path = url.substr(0, url.find_first_of("?#"));
  std::string name = base_name(path);
  if (!valid_name_part(name)) name = "model.gguf";
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the URL: one cache entry per URL
  for (unsigned char c : url) h = (h ^ c) * 1099511628211ull;
  return download(o, url, fmt::format("{}/url/{:016x}-{}", o.cache_dir, h, name));
}

}  // namespace opal::hub
