#include "tools/llama_flags.h"

#include <algorithm>

namespace opal::tools {

const std::vector<std::string>& llama_multi_letter_flags() {
  static const std::vector<std::string> names = {
      "ub", "tb",  "ctk", "ctv",  "ngl",   "np", "cb", "fa",   "lm",  "lv",   "pg",   "sys",  "cnv", "no-cnv", "dev",
      "sm", "ts",  "mg",  "ot",   "ncmoe", "to", "hf", "hff",  "mu",  "nkvo", "dt",   "mli",  "nr",  "sp",     "sps",
      "md", "hfd", "hfr", "hfrd", "hft",   "cd", "td", "devd", "tbd", "ctkd", "ctvd", "hffd", "lcs", "lcd",
  };
  return names;
}

std::vector<std::string> map_llama_flags(int argc, const char* const* argv) {
  const auto& names = llama_multi_letter_flags();
  std::vector<std::string> out;
  out.reserve(size_t(argc));
  bool rest_verbatim = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && !rest_verbatim) {
      if (a == "--") {
        rest_verbatim = true;
      } else if (a.size() > 2 && a[0] == '-' && a[1] != '-') {
        const std::string name = a.substr(1, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 1);
        if (std::find(names.begin(), names.end(), name) != names.end()) a = "-" + a;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace opal::tools
