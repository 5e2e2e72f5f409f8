#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace opal::test {

std::string shared_dir() {
  const char* env = std::getenv("OPAL_SHARED_DIR");
  return env && *env ? env : OPAL_DEFAULT_SHARED_DIR;
}

std::string shared_path(const std::string& rel) {
  std::string p = shared_dir() + "/" + rel;
  if (!std::filesystem::exists(p))
    ADD_FAILURE() << "shared test data missing: " << p
                  << " (set OPAL_SHARED_DIR to the folder holding models/, golden/, tokenizer-vectors/)";
  return p;
}

std::string golden_model(const std::string& stem) { return shared_path("golden/models/" + stem + ".gguf"); }

std::string opal_binary() { return OPAL_BINARY; }
std::string source_dir() { return OPAL_SOURCE_DIR; }

size_t binary_sweep_stride() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return 3;
#else
  return 1;
#endif
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    if (output) output->append(buf.data(), n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

namespace {
std::string g_temp_dir;
void remove_temp_dir() {
  std::error_code ec;
  if (!g_temp_dir.empty()) std::filesystem::remove_all(g_temp_dir, ec);
}
}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  const std::string s = read_file(path);
  return {s.begin(), s.end()};
}

std::string temp_dir() {
  if (g_temp_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "opal-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    g_temp_dir = tmpl;
    std::atexit(remove_temp_dir);
  }
  return g_temp_dir;
}

}  // namespace opal::test
