// llama.cpp's --spec-type ngram-cache (its "lookup" decoding): n-gram
// statistics that draft the next tokens (docs/speculative.md).
//
//   NgramCache          n-gram (1 to 4 tokens) -> the tokens that followed it, with counts. Read and written in
//                       llama.cpp's lookup-cache file format (llama-lookup-create, -lcs, -lcd): records of four
//                       int32 key tokens (-1 past the n-gram's length), an int32 count of followers k > 0, then k
//                       pairs of int32 token and int32 count > 0; little-endian, no header, until the end of file
//   NgramCacheDrafter   drafts from three caches: the context cache (every 1- to 4-gram of the current text, kept
//                       up to date as the text grows), the dynamic cache (-lcd: earlier runs' text, read at start
//                       and written back with this run's text at its end) and the static cache (-lcs: 2-grams of a
//                       corpus, read only). Each draft token is the first found of: the context cache's best
//                       follower of the longest n-gram with enough samples (lax thresholds), the dynamic cache's
//                       (strict thresholds), the static cache's follower of the last 2 tokens; a follower's count
//                       is weighted by 100 x its static count when the static cache knows it after the last 2
//                       tokens. Drafting stops at the first position with none.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/speculative.h"

namespace opal {

class NgramCache {
 public:
  static constexpr int kMaxN = 4;                              // longest n-gram (llama.cpp's LLAMA_NGRAM_MAX)
  static constexpr int kStaticN = 2;                           // the static cache's n-gram length (LLAMA_NGRAM_STATIC)
  using Key = std::array<int32_t, kMaxN>;                      // the n-gram, -1 past its length
  using Followers = std::vector<std::pair<int32_t, int32_t>>;  // (token, count), in the order first seen

  // Counts the n-grams of lengths n_min..n_max of `tokens` whose next token is at index `from` or later.
  void add(std::span<const int32_t> tokens, size_t from, int n_min = 1, int n_max = kMaxN);
  // Adds `other`'s counts to this cache's.
  void merge(const NgramCache& other);
  // The followers of the n-gram `key` (1 to kMaxN tokens); null when it was never seen.
  const Followers* find(std::span<const int32_t> key) const;
  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  void clear() { map_.clear(); }

  // Reads a lookup-cache file. Throws opal::Error naming the file and the byte offset for a missing, truncated
  // or malformed file, or a token id outside [0, n_vocab) (n_vocab 0: not checked).
  static NgramCache load(const std::string& path, int64_t n_vocab = 0);
  // Writes the file (through a temporary file renamed over it). Throws opal::Error naming the file.
  void save(const std::string& path) const;

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  void count(const Key& key, int32_t token, int32_t n);
  std::unordered_map<Key, Followers, KeyHash> map_;
};

class NgramCacheDrafter : public Drafter {
 public:
  // `static_cache` (-lcs) and `dynamic` (-lcd) may be empty. `save_path`: where finish() writes the dynamic
  // cache with this run's text added (empty: nothing is written, as in opal serve).
  NgramCacheDrafter(NgramCache static_cache, NgramCache dynamic, std::string save_path = {});
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int n_max) override;
  // Forgets the context cache (bench-spec's next repetition); what it held is not written back.
  void reset() override;
  // Merges the context caches of this run (the current one and those of texts that were replaced, e.g. after
  // chat's /clear) into the dynamic cache and writes it to the save path; returns what was done.
  std::string finish() override;
  const NgramCache& context() const { return context_; }

 private:
  NgramCache static_, dynamic_, context_, retired_;
  std::string save_path_;
  std::vector<int32_t> seen_;  // the tokens whose n-grams are in context_
};

// The drafter --spec-type ngram-cache names: the files of -lcs and -lcd read (token ids checked against
// n_vocab); -lcd written back by finish() when write_back.
std::unique_ptr<NgramCacheDrafter> make_ngram_cache_drafter(const std::string& static_path,
                                                            const std::string& dynamic_path, int64_t n_vocab,
                                                            bool write_back);

}  // namespace opal
