#include "rocket/golden_support.h"

#include <filesystem>
#include <fstream>

#include "support/test_support.h"

namespace opal::rocket::test {

GoldenCase load_case(const std::string& name) {
  return load_golden_case(opal::test::shared_path("rocket-golden/" + name + "/case.json"));
}

bool read_golden_file(const GoldenCase& c, const std::string& file, std::vector<uint8_t>& out) {
  const std::string path = c.dir + "/" + file;
  if (!std::filesystem::exists(path)) return false;
  out = opal::test::read_bytes(path);
  return true;
}

}  // namespace opal::rocket::test
