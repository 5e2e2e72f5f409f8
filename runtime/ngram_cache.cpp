// llama.cpp's ngram-cache drafting and its lookup-cache files (runtime/ngram_cache.h).
#include "runtime/ngram_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace opal {
namespace {

// The least samples (sum of the followers' counts) and the least share in percent of the best follower for a
// draft from an n-gram of length n (index n - 1): lax for the context cache, strict for the dynamic one.
// llama.cpp's values.
constexpr int kLaxSamples[NgramCache::kMaxN] = {2, 2, 1, 1};
constexpr int kLaxPercent[NgramCache::kMaxN] = {66, 50, 50, 50};
constexpr int kStrictSamples[NgramCache::kMaxN] = {4, 3, 2, 2};
constexpr int kStrictPercent[NgramCache::kMaxN] = {75, 66, 66, 66};

NgramCache::Key make_key(std::span<const int32_t> t) {
  NgramCache::Key k;
  k.fill(-1);
  std::copy(t.begin(), t.end(), k.begin());
  return k;
}

int32_t static_count(const NgramCache::Followers* st, int32_t token) {
  if (!st) return 0;
  for (const auto& [t, c] : *st)
    if (t == token) return c;
  return 0;
}

// The best follower of the longest n-gram ending `win` that has enough samples in `cache`, -1 if none. A
// follower's count is weighted by 100 x its count after the last 2 tokens in the static cache (1 if absent).
int32_t pick(const NgramCache& cache, std::span<const int32_t> win, const NgramCache::Followers* st,
             const int* min_samples, const int* min_percent) {
  for (size_t n = win.size(); n >= 1; --n) {
    const NgramCache::Followers* f = cache.find(win.subspan(win.size() - n));
    if (!f) continue;
    int32_t best = -1;
    int64_t best_count = 0, best_weight = 0, sum = 0;
    for (const auto& [t, c] : *f) {
      const int32_t s = static_count(st, t);
      const int64_t w = s > 0 ? 100 * int64_t(s) : 1;
      if (int64_t(c) * w > best_count * best_weight) {
        best = t;
        best_count = c;
        best_weight = w;
      }
      sum += c;
    }
    if (sum < min_samples[n - 1] || 100 * best_count < int64_t(min_percent[n - 1]) * sum) continue;
    return best;
  }
  return -1;
}

}  // namespace

size_t NgramCache::KeyHash::operator()(const Key& k) const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : k) h = (h ^ uint32_t(t)) * 0x100000001b3ull;
  return size_t(h ^ (h >> 32));
}

void NgramCache::count(const Key& key, int32_t token, int32_t n) {
  Followers& f = map_[key];
  auto it = std::find_if(f.begin(), f.end(), [token](const auto& p) { return p.first == token; });
  if (it == f.end()) f.emplace_back(token, n);
  else it->second += n;
}

void NgramCache::add(std::span<const int32_t> tokens, size_t from, int n_min, int n_max) {
  for (int n = n_min; n <= n_max; ++n)
    for (size_t i = std::max(from, size_t(n)); i < tokens.size(); ++i)
      count(make_key(tokens.subspan(i - size_t(n), size_t(n))), tokens[i], 1);
}

void NgramCache::merge(const NgramCache& other) {
  for (const auto& [key, f] : other.map_)
    for (const auto& [t, c] : f) count(key, t, c);
}

const NgramCache::Followers* NgramCache::find(std::span<const int32_t> key) const {
  if (key.empty() || key.size() > size_t(kMaxN)) return nullptr;
  const auto it = map_.find(make_key(key));
  return it == map_.end() ? nullptr : &it->second;
}

NgramCache NgramCache::load(const std::string& path, int64_t n_vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("lookup cache '{}': cannot open the file", path);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) fail("lookup cache '{}': read error", path);
  NgramCache c;
  size_t at = 0;
  const auto i32 = [&](size_t off) {
    int32_t v;
    std::memcpy(&v, bytes.data() + off, sizeof v);
    return v;
  };
  const auto check_token = [&](int32_t t, size_t off) {
    if (t < 0 || (n_vocab > 0 && t >= n_vocab))
      fail("lookup cache '{}': token id {} at byte {} is outside the model's vocabulary of {} tokens", path, t, off,
           n_vocab);
  };
  while (at < bytes.size()) {
    const size_t rec = at;
    if (bytes.size() - at < 20)
      fail("lookup cache '{}': truncated: the n-gram record at byte {} needs 20 bytes, {} left", path, rec,
           bytes.size() - at);
    Key key;
    int len = 0;
    for (int j = 0; j < kMaxN; ++j) key[size_t(j)] = i32(at + 4 * size_t(j));
    while (len < kMaxN && key[size_t(len)] != -1) check_token(key[size_t(len)], at + 4 * size_t(len)), ++len;
    for (int j = len; j < kMaxN; ++j)
      if (key[size_t(j)] != -1)
        fail("lookup cache '{}': malformed n-gram at byte {}: token {} after the end marker -1", path, rec,
             key[size_t(j)]);
    if (len == 0) fail("lookup cache '{}': malformed n-gram at byte {}: no tokens", path, rec);
    const int32_t k = i32(at + 16);
    at += 20;
    if (k <= 0) fail("lookup cache '{}': the n-gram record at byte {} has {} followers (must be > 0)", path, rec, k);
    if (uint64_t(k) * 8 > bytes.size() - at)
      fail("lookup cache '{}': truncated: the n-gram record at byte {} lists {} followers ({} bytes), {} left", path,
           rec, k, uint64_t(k) * 8, bytes.size() - at);
    const bool fresh = c.map_.find(key) == c.map_.end();
    Followers& f = c.map_[key];
    if (fresh) f.reserve(size_t(k));
    for (int32_t j = 0; j < k; ++j, at += 8) {
      const int32_t t = i32(at), n = i32(at + 4);
      check_token(t, at);
      if (n <= 0) fail("lookup cache '{}': count {} at byte {} (must be > 0)", path, n, at + 4);
      if (fresh) f.emplace_back(t, n);  // a record lists each follower once: no search needed
      else c.count(key, t, n);          // the n-gram again (not written so, but harmless): counts add up
    }
  }
  return c;
}

void NgramCache::save(const std::string& path) const {
  std::vector<const std::pair<const Key, Followers>*> items;
  items.reserve(map_.size());
  for (const auto& kv : map_) items.push_back(&kv);
  std::sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  std::vector<char> out;
  const auto put = [&out](int32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
  };
  for (const auto* kv : items) {
    for (int32_t t : kv->first) put(t);
    put(int32_t(kv->second.size()));
    for (const auto& [t, c] : kv->second) put(t), put(c);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("lookup cache '{}': cannot write '{}'", path, tmp);
    f.write(out.data(), std::streamsize(out.size()));
    if (!f.flush()) fail("lookup cache '{}': write error on '{}'", path, tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("lookup cache '{}': cannot replace it with '{}'", path, tmp);
  }
}

NgramCacheDrafter::NgramCacheDrafter(NgramCache static_cache, NgramCache dynamic, std::string save_path)
    : static_(std::move(static_cache)), dynamic_(std::move(dynamic)), save_path_(std::move(save_path)) {}

void NgramCacheDrafter::reset() {
  context_.clear();
  seen_.clear();
}

std::vector<int32_t> NgramCacheDrafter::draft(std::span<const int32_t> tokens, int n_max) {
  // The context cache follows the text: the n-grams of new tokens are added; a text that is not the one seen
  // plus more (a new conversation, a truncation, a context shift) is counted again from the start. For the
  // save, only the n-grams of what was dropped (those ending past the kept prefix) are retired: the kept
  // prefix's are counted again in the context cache, and the saved file would count them twice.
  size_t from = size_t(std::mismatch(seen_.begin(), seen_.end(), tokens.begin(), tokens.end()).first - seen_.begin());
  if (from < seen_.size()) {
    if (!save_path_.empty()) retired_.add(seen_, from);
    context_.clear();
    from = 0;
  }
  context_.add(tokens, from);
  seen_.assign(tokens.begin(), tokens.end());

  std::vector<int32_t> out;
  if (n_max <= 0 || tokens.size() < size_t(NgramCache::kStaticN)) return out;
  // The last kMaxN tokens of the text followed by the draft so far.
  std::vector<int32_t> win(tokens.end() - std::ptrdiff_t(std::min(tokens.size(), size_t(NgramCache::kMaxN))),
                           tokens.end());
  while (int(out.size()) < n_max) {
    const std::span<const int32_t> w(win);
    const NgramCache::Followers* st = static_.find(w.subspan(w.size() - NgramCache::kStaticN));
    int32_t t = pick(context_, w, st, kLaxSamples, kLaxPercent);
    if (t < 0) t = pick(dynamic_, w, st, kStrictSamples, kStrictPercent);
    if (t < 0 && st) {  // the static cache alone: its most frequent follower of the last 2 tokens
      int64_t best = 0, sum = 0;
      for (const auto& [tok, c] : *st) {
        if (c > best) best = c, t = tok;
        sum += c;
      }
      const int i = NgramCache::kStaticN - 1;
      if (sum < kLaxSamples[i] || 100 * best < int64_t(kLaxPercent[i]) * sum) t = -1;
    }
    if (t < 0) break;
    out.push_back(t);
    if (win.size() == size_t(NgramCache::kMaxN)) win.erase(win.begin());
    win.push_back(t);
  }
  return out;
}

std::string NgramCacheDrafter::finish() {
  if (save_path_.empty()) return {};
  dynamic_.merge(retired_);
  dynamic_.merge(context_);
  retired_.clear();
  context_.clear();
  seen_.clear();
  dynamic_.save(save_path_);
  return fmt::format("lookup cache: wrote {} n-grams to '{}'", dynamic_.size(), save_path_);
}

std::unique_ptr<NgramCacheDrafter> make_ngram_cache_drafter(const std::string& static_path,
                                                            const std::string& dynamic_path, int64_t n_vocab,
                                                            bool write_back) {
  NgramCache st, dyn;
  if (!static_path.empty()) st = NgramCache::load(static_path, n_vocab);
  // A dynamic file that does not exist yet is started (llama.cpp's lookup starts it the same way).
  if (!dynamic_path.empty() && std::ifstream(dynamic_path, std::ios::binary))
    dyn = NgramCache::load(dynamic_path, n_vocab);
  return std::make_unique<NgramCacheDrafter>(std::move(st), std::move(dyn), write_back ? dynamic_path : std::string());
}

}  // namespace opal
