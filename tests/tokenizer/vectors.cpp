#include "tokenizer/vectors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/gguf.h"
#include "support/test_support.h"

namespace opal::test {

std::vector<VectorCase> read_vectors(const std::string& inp_path, const std::string& out_path) {
  const std::string inp = read_file(inp_path), out = read_file(out_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<int32_t>> lines;
  std::istringstream os(out);
  std::string line;
  while (std::getline(os, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int64_t id;
    while (ls >> id) ids.push_back(int32_t(id));
    lines.push_back(ids);
  }
  EXPECT_EQ(texts.size(), lines.size()) << inp_path << " vs " << out_path;
  std::vector<VectorCase> cases;
  for (size_t i = 0; i < std::min(texts.size(), lines.size()); ++i) cases.push_back({texts[i], lines[i]});
  return cases;
}

const Vocab& load_vocab(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Vocab>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) {
    auto v = std::make_unique<Vocab>(Vocab::from_gguf(gguf::File::open(path)));
    it = cache.emplace(path, std::move(v)).first;
  }
  return *it->second;
}

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

}  // namespace opal::test
