// The files `opal rocket replay CASE_DIR/case.json --out DIR` writes equal the
// golden files byte for byte (Mesa policy, golden fake addresses).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rocket/golden_support.h"
#include "support/test_support.h"

namespace opal::rocket {
namespace {

TEST(RocketReplayFiles, WriteReplayFilesInTheGoldenFormats) {
  const GoldenCase c = test::load_case("gemm_M64_K512_N128");
  const std::string out = opal::test::temp_dir() + "/lib_replay";
  write_replay_files(replay_case(c, Policy::Mesa, 0x10000000), out);
  for (const char* file : {"regcmd.bin", "weights.bin", "biases.bin", "input.bin"})
    EXPECT_EQ(opal::test::read_bytes(out + "/" + file), opal::test::read_bytes(c.dir + "/" + file)) << file;
}

}  // namespace
}  // namespace opal::rocket
