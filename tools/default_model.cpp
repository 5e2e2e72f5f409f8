// Finds the default model; see default_model.h for the search order.
#include "tools/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace opal::tools {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "models/opal-kjv.gguf";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::string default_model_path() {
  if (const char* env = std::getenv("OPAL_DEFAULT_MODEL"); env && *env) {
    if (!is_file(env)) fail("OPAL_DEFAULT_MODEL = '{}' is not a file", env);
    return env;
  }
  std::vector<fs::path> tried;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      tried.push_back(dir / kModelFile);
      tried.push_back(dir / "share/opal" / kModelFile);
      if (dir == dir.root_path()) break;
    }
  }
#ifdef OPAL_SOURCE_DIR
  tried.push_back(fs::path(OPAL_SOURCE_DIR) / kModelFile);
#endif
  std::string looked;
  for (const fs::path& p : tried) {
    if (is_file(p)) return p.string();
    looked += "\n  " + p.string();
  }
  fail("no -m given and the default model {} was not found; set OPAL_DEFAULT_MODEL or pass -m. Looked in:{}",
       kModelFile, looked);
}

}  // namespace opal::tools
