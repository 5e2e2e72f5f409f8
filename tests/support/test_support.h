// Helpers shared by every test binary: data paths, files, commands, errors.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace opal::test {

// The shared data folder: $OPAL_SHARED_DIR, else the build's default (../shared).
std::string shared_dir();
// shared_dir() + "/" + rel; FAILS the current test (not skips) when it is absent,
// with a message naming the path and the setting.
std::string shared_path(const std::string& rel);
// shared_path("golden/models/" + stem + ".gguf"): the tiny models the goldens come from.
std::string golden_model(const std::string& stem);
// The opal binary built alongside the tests.
std::string opal_binary();
// The repository root.
std::string source_dir();
// Sweeps that start the opal binary once per case (every shared GGUF through
// `opal inspect`, every chat-template case through `opal template`) take every
// case in release builds and every third under the sanitizers, where each start
// of the instrumented binary costs about a second; the same cases still run
// in-process under the sanitizers (test_jinja, the GGUF reader's tests and fuzzing).
size_t binary_sweep_stride();
// Runs a shell command; returns its exit status and captures stdout+stderr.
int run_command(const std::string& cmd, std::string* output);
// A fresh temporary directory, removed at process exit.
std::string temp_dir();

// A whole file's bytes; FAILS the current test (empty result) when it cannot be read.
std::string read_file(const std::string& path);
std::vector<uint8_t> read_bytes(const std::string& path);

// The message of the opal::Error that call() throws; "" if it throws none.
template <typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// EXPECTs that call() throws an opal::Error whose message contains every needle.
template <typename F>
void expect_error(F&& call, std::initializer_list<std::string> needles) {
  try {
    call();
    ADD_FAILURE() << "no opal::Error thrown; expected one mentioning '" << *needles.begin() << "'";
  } catch (const Error& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}
template <typename F>
void expect_error(F&& call, const std::string& needle) {
  expect_error(std::forward<F>(call), {needle});
}

}  // namespace opal::test
