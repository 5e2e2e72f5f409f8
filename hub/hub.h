// Models by name: `-hf user/repo[:quant]`, `-hff file`, `-mu URL` and `opal pull`
// (docs/models-by-name.md).
//
//   HubOptions o = HubOptions::from_env();     // HF_ENDPOINT, HF_TOKEN, OPAL_CACHE, offline
//   std::string path = fetch_hf(o, "ggml-org/Qwen3-0.6B-GGUF:q8_0");   // cached local file
//
// Files come from the hub's resolve API ({endpoint}/{repo}/resolve/{revision}/{file}, revision main by default);
// the repository's file list from its tree API
// ({endpoint}/api/models/{repo}/tree/{revision}?recursive=true). A file is written
// to `<name>.part` beside its place in the cache, resumed with an HTTP Range
// request after an interrupted transfer, checked against the size and sha256
// the hub announces (X-Linked-Size / X-Linked-Etag, or Content-Length / ETag)
// and only then renamed to its final name, so a partial or corrupt download
// is never used as a model.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace opal::hub {

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, else MODEL_ENDPOINT
  std::string token;                                // HF_TOKEN: sent as a Bearer token to the endpoint
  std::string cache_dir;                            // OPAL_CACHE, else $XDG_CACHE_HOME/opal, else ~/.cache/opal
  bool offline = false;                             // OPAL_OFFLINE or HF_HUB_OFFLINE set to 1: only the cache
  bool progress = true;                             // a progress bar on stderr
  int retries = 3;                                  // resumed attempts after a dropped transfer
  // The repository revision (--hf-revision): a branch, tag or commit. Other than main, its files are
  // cached apart, in hf/<user>/<repo>@<revision> ('/' in a branch name becomes "--").
  std::string revision = "main";
  static HubOptions from_env();
};

// "user/repo[:tag]": the tag names a quantization (case-insensitive), e.g. q4_k_m.
struct HfRef {
  std::string repo;
  std::string tag;
};
HfRef parse_hf_ref(const std::string& spec);

// The GGUF file(s) `tag` names among a repository's files: the files whose
// name holds the tag as a word (Q8_0 matches "model-Q8_0.gguf"); with no tag,
// Q4_K_M, then Q8_0, then the first GGUF. A split model
// (`name-0000k-of-0000N.gguf`) gives all its N parts, in order (an error
// names the missing ones). mmproj files are never picked. Throws opal::Error
// listing the GGUF files there are when nothing matches.
std::vector<std::string> pick_gguf(const std::vector<std::string>& files, const std::string& tag);

// The repository's file paths from its tree API.
std::vector<std::string> list_repo_files(const HubOptions& o, const std::string& repo);

// Downloads (or finds in the cache) `-hf spec` (with `-hff file` when given:
// that file instead of picking by tag) and returns the local path of the
// model (its first part for a split model; every part is fetched).
std::string fetch_hf(const HubOptions& o, const std::string& spec, const std::string& file = {});
// Downloads (or finds in the cache) a model by URL; returns the local path.
std::string fetch_url(const HubOptions& o, const std::string& url);

// What the server announced for a file (HEAD).
struct RemoteFile {
  long status = 0;
  uint64_t size = 0;   // 0: unknown
  std::string sha256;  // lower-case hex, or "" when the ETag is not a sha256
  std::string etag;    // as sent (quotes and W/ removed)
};

// Downloads `url` to `dest` through `dest.part` (resumed when it exists and
// the ETag it was started with still holds), verifies it and renames it.
// Offline: `dest` when it is complete, else an error. Returns dest.
std::string download(const HubOptions& o, const std::string& url, const std::string& dest);

// Lower-case hex sha256 of a file.
std::string sha256_file(const std::string& path);

}  // namespace opal::hub
