// Helpers shared by every test binary.
#pragma once
#include <string>

namespace opal::test {

// The shared data folder: $OPAL_SHARED_DIR, else the build's default (../shared).
std::string shared_dir();
// shared_dir() + "/" + rel; FAILS the current test (not skips) when it is absent,
// with a message naming the path and the setting.
std::string shared_path(const std::string& rel);
// The opal binary built alongside the tests.
std::string opal_binary();
// The repository root.
std::string source_dir();
// Runs a shell command; returns its exit status and captures stdout+stderr.
int run_command(const std::string& cmd, std::string* output);
// A fresh temporary directory, removed at process exit.
std::string temp_dir();

}  // namespace opal::test
