// --no-repack / -nr (llama.cpp's names for turning load-time repacking off,
// docs/cpu-decode.md "Decode at the wall"): `opal bench` names what ran on
// its isa line: the weights repacked under --isa avx2 for a Q8_0 file by
// default, "--no-repack" with either spelling of the flag.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace {

std::string repack_flag_bench(const std::string& flags, int* status) {
  std::string out;
  *status = opal::test::run_command(opal::test::opal_binary() + " bench -m " +
                                        opal::test::shared_path("golden/models/tiny-llama-q8_0.gguf") +
                                        " -p 0 -n 4 -r 1 -t 1 --no-bw --isa avx2 " + flags + " 2>/dev/null",
                                    &out);
  return out;
}

TEST(RepackFlag, BenchIsaLineSaysWhichLayoutRan) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: no repacked layout on this host";
#else
  GTEST_SKIP() << "the repacked layouts are AVX2's";
#endif
  int status = -1;
  const std::string on = repack_flag_bench("", &status);
  ASSERT_EQ(status, 0) << on;
  EXPECT_NE(on.find(", repacked "), std::string::npos) << on;
  for (const char* flag : {"--no-repack", "-nr"}) {
    const std::string off = repack_flag_bench(flag, &status);
    ASSERT_EQ(status, 0) << flag << "\n" << off;
    EXPECT_NE(off.find(", --no-repack"), std::string::npos) << flag << "\n" << off;
    EXPECT_EQ(off.find(", repacked "), std::string::npos) << flag << "\n" << off;
  }
}

}  // namespace
