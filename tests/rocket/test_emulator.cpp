// The emulator: for every golden case, the output of the builder's jobs run
// in software equals an integer reference computed from the host data; the
// checks on register programming fail with errors naming task and register;
// the OUT_CVT rounding parameter behaves as documented.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backends/rocket/abi/regcmd.h"
#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "core/error.h"
#include "rocket/golden_support.h"

namespace opal::rocket {
namespace {

using test::golden_case_names;
using test::load_case;

// Compares the emulator's output BO with the reference for the real channels
// of the first `rows` output rows.
void expect_output_matches(const EmulatedRun& run, const ReferenceOutput& ref, unsigned rows) {
  const unsigned out_rows = run.replay.compiled.op.out_height;  // rows per channel surface in the BO
  size_t mismatches = 0;
  for (unsigned r = 0; r < rows; r++)
    for (unsigned col = 0; col < ref.cols; col++)
      for (unsigned n = 0; n < ref.channels; n++) {
        const size_t at = ((size_t(n / 16) * out_rows + r) * ref.cols + col) * 16 + n % 16;
        const int8_t got = int8_t(run.output_bo.at(at));
        const int8_t want = ref.output[(size_t(r) * ref.cols + col) * ref.channels + n];
        if (got != want && mismatches++ < 5)
          ADD_FAILURE() << fmt::format("row {} col {} channel {}: emulator {} reference {} (acc {})", r, col, n, got,
                                       want, ref.accumulators[(size_t(r) * ref.cols + col) * ref.channels + n]);
      }
  EXPECT_EQ(mismatches, 0u);
}

class GoldenEmulator : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenEmulator, MesaStreamsComputeTheIntegerReference) {
  const GoldenCase c = load_case(GetParam());
  const EmulatedRun run = run_case_on_emulator(c, Policy::Mesa, {});
  const ReferenceOutput ref = reference_output(c, Rounding::HalfAwayFromZero);
  expect_output_matches(run, ref, ref.rows);
  EXPECT_EQ(run.tasks.size(), c.json.at("task_count").get<size_t>());
  // The reference is not degenerate: outputs are spread over the int8 range.
  int lo = 127, hi = -128;
  for (int8_t v : ref.output) lo = std::min<int>(lo, v), hi = std::max<int>(hi, v);
  EXPECT_LT(lo, -20);
  EXPECT_GT(hi, 20);
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenEmulator, ::testing::ValuesIn(golden_case_names()),
                         [](const auto& info) { return info.param; });

TEST(RocketEmulator, WrappedSurfaceStrideOfMesaM1IsReported) {
  const GoldenCase c = load_case("gemm_M1_K2048_N2048");
  const EmulatedRun run = run_case_on_emulator(c, Policy::Mesa, {});
  ASSERT_EQ(run.warnings.size(), 1u);
  EXPECT_NE(run.warnings[0].find("CNA_DMA_CON2"), std::string::npos) << run.warnings[0];
  EmulatorOptions strict;
  strict.reject_wrapped_surface_stride = true;
  try {
    run_case_on_emulator(c, Policy::Mesa, strict);
    FAIL() << "expected an error";
  } catch (const opal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("task 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CNA_DMA_CON2"), std::string::npos) << e.what();
  }
}

TEST(RocketEmulator, OutCvtRoundingIsAnExplicitParameter) {
  // 3/2 = 1.5, -3/2 = -1.5, 5/2 = 2.5, 7/4 = 1.75, -7/4 = -1.75
  struct Case {
    int64_t v;
    unsigned shift;
    int away, up, even, trunc;
  };
  for (const Case& k : {Case{3, 1, 2, 2, 2, 1}, Case{-3, 1, -2, -1, -2, -1}, Case{5, 1, 3, 3, 2, 2},
                        Case{7, 2, 2, 2, 2, 1}, Case{-7, 2, -2, -2, -2, -1}, Case{-5, 1, -3, -2, -2, -2}}) {
    EXPECT_EQ(round_shift(k.v, k.shift, Rounding::HalfAwayFromZero), k.away) << k.v << ">>" << k.shift;
    EXPECT_EQ(round_shift(k.v, k.shift, Rounding::HalfUp), k.up) << k.v << ">>" << k.shift;
    EXPECT_EQ(round_shift(k.v, k.shift, Rounding::HalfEven), k.even) << k.v << ">>" << k.shift;
    EXPECT_EQ(round_shift(k.v, k.shift, Rounding::Truncate), k.trunc) << k.v << ">>" << k.shift;
  }
  // Offset after scaling, then int8 saturation.
  EXPECT_EQ(out_cvt_int8(100, 3, 1, 0, Rounding::HalfAwayFromZero), 127);
  EXPECT_EQ(out_cvt_int8(-100, 3, 1, 0, Rounding::HalfAwayFromZero), -128);
  EXPECT_EQ(out_cvt_int8(10, 1 << 14, 15, -3, Rounding::HalfAwayFromZero), 2);  // 10 * 0.5 - 3
  EXPECT_EQ(parse_rounding("half-even"), Rounding::HalfEven);
  EXPECT_THROW(parse_rounding("nearest"), opal::Error);
}

// A small valid job in a BoSpace whose regcmd entries a test may corrupt.
struct SmallJob {
  GoldenCase c = load_case("gemm_M32_K64_N64");
  ReplayResult r = replay_case(c, Policy::Mesa, 0x10000000);
  std::vector<uint64_t> entries = r.regcmd.entries;

  std::string run(const EmulatorOptions& options = {}) {
    BoSpace space;
    uint32_t regcmd_handle = 0;
    for (const BoPlacement& b : r.bos) {
      const BoInfo bo = space.create_at(b.iova, b.size);
      if (b.role == "regcmd") regcmd_handle = bo.handle;
    }
    uint8_t* p = space.data(regcmd_handle);
    for (size_t i = 0; i < entries.size(); i++)
      for (int k = 0; k < 8; k++) p[i * 8 + k] = uint8_t(entries[i] >> (8 * k));
    NpuEmulator emu(space, options);
    try {
      emu.run_job(r.jobs.at(0));
    } catch (const opal::Error& e) {
      return e.what();
    }
    return "";
  }
  size_t index_of(uint16_t offset) const {
    for (size_t i = 0; i < entries.size(); i++)
      if ((entries[i] & 0xffff) == offset && (entries[i] >> 48) != 0x0081 && entries[i] != 0) return i;
    return SIZE_MAX;
  }
  void set(uint16_t offset, uint32_t value) {
    for (uint64_t& e : entries)
      if ((e & 0xffff) == offset && e != 0 && (e >> 48) != 0x0081)
        e = abi::encode_entry(uint16_t(e >> 48), offset, value);
  }
  uint32_t get(uint16_t offset) const { return uint32_t(entries.at(index_of(offset)) >> 16); }
};

void expect_error(const std::string& what, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(what.empty()) << "expected an emulator error";
  for (const char* p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' missing in: " << what;
}

TEST(RocketEmulatorErrors, ValidJobRuns) { EXPECT_EQ(SmallJob().run(), ""); }

TEST(RocketEmulatorErrors, UnknownRegister) {
  SmallJob j;
  j.entries[10] = abi::encode_entry(abi::Block::CNA, 0x1234, 7);
  expect_error(j.run(), {"job 0 task 0", "unknown register 0x1234"});
}

TEST(RocketEmulatorErrors, RegisterWrittenThroughTheWrongBlock) {
  SmallJob j;
  j.entries[9] = abi::encode_entry(abi::Block::DPU, abi::reg::CNA_DATA_SIZE0, 0x00010020);
  expect_error(j.run(), {"task 0", "CNA_DATA_SIZE0", "belongs to CNA"});
}

TEST(RocketEmulatorErrors, CbufBanksOverflow) {
  SmallJob j;
  j.set(abi::reg::CNA_CBUF_CON0, abi::fld::CBUF_CON0_DATA_BANK(6) | abi::fld::CBUF_CON0_WEIGHT_BANK(8));
  expect_error(j.run(), {"task 0", "CNA_CBUF_CON0", "exceeds the 12 CBUF banks"});
}

TEST(RocketEmulatorErrors, InputLargerThanDataBanks) {
  SmallJob j;
  // 32 rows x 1 entry fit one bank; 600 rows do not.
  j.set(abi::reg::CNA_DATA_SIZE0, abi::fld::DATA_SIZE0_DATAIN_WIDTH(1) | abi::fld::DATA_SIZE0_DATAIN_HEIGHT(600));
  expect_error(j.run(), {"task 0", "CNA_CBUF_CON0", "CBUF bank overflow"});
}

TEST(RocketEmulatorErrors, ResidentWeightsOverflowWhenRequired) {
  const GoldenCase c = load_case("gemm_M16_K4096_N4096");
  EmulatorOptions strict;
  strict.require_resident_weights = true;
  try {
    run_case_on_emulator(c, Policy::Mesa, strict);
    FAIL() << "Mesa's single 16 MiB-weight task must be rejected";
  } catch (const opal::Error& e) {
    expect_error(e.what(), {"task 0", "CNA_WEIGHT_SIZE0", "WEIGHT_BANK"});
  }
}

TEST(RocketEmulatorErrors, MisalignedAddress) {
  SmallJob j;
  j.set(abi::reg::CNA_FEATURE_DATA_ADDR, j.get(abi::reg::CNA_FEATURE_DATA_ADDR) + 8);
  expect_error(j.run(), {"task 0", "CNA_FEATURE_DATA_ADDR", "not 16-byte aligned"});
  SmallJob k;
  k.set(abi::reg::DPU_DST_BASE_ADDR, k.get(abi::reg::DPU_DST_BASE_ADDR) + 4);
  expect_error(k.run(), {"task 0", "DPU_DST_BASE_ADDR", "not 16-byte aligned"});
}

TEST(RocketEmulatorErrors, AddressOutsideEveryBuffer) {
  SmallJob j;
  j.set(abi::reg::CNA_DCOMP_ADDR0, 0x7fff0000);
  expect_error(j.run(), {"task 0", "CNA_DCOMP_ADDR0", "outside every buffer"});
}

TEST(RocketEmulatorErrors, ShapeLimits) {
  SmallJob j;  // K beyond 8192 per task
  j.set(abi::reg::CNA_DATA_SIZE1,
        abi::fld::DATA_SIZE1_DATAIN_CHANNEL(8208) | abi::fld::DATA_SIZE1_DATAIN_CHANNEL_REAL(8207));
  j.set(abi::reg::CNA_WEIGHT_SIZE1, 8208);
  expect_error(j.run(), {"task 0", "CNA_WEIGHT_SIZE1", "per-task limit"});
  SmallJob k;  // channel count not a multiple of 16
  k.set(abi::reg::CNA_DATA_SIZE1,
        abi::fld::DATA_SIZE1_DATAIN_CHANNEL(72) | abi::fld::DATA_SIZE1_DATAIN_CHANNEL_REAL(63));
  expect_error(k.run(), {"task 0", "CNA_DATA_SIZE1", "multiple of 16"});
  SmallJob l;  // output taller than the input allows
  l.set(abi::reg::CORE_DATAOUT_SIZE_0, abi::fld::DATAOUT_SIZE_0_HEIGHT(40) | abi::fld::DATAOUT_SIZE_0_WIDTH(0));
  l.set(abi::reg::DPU_DATA_CUBE_HEIGHT, 40);
  l.set(abi::reg::CNA_DATA_SIZE3, 41);
  expect_error(l.run(), {"task 0", "CORE_DATAOUT_SIZE_0", "shape limit"});
}

TEST(RocketEmulatorErrors, MissingTailTimesOut) {
  SmallJob j;
  j.entries.back() = 0;
  expect_error(j.run(), {"task 0", "PC tail", "times out"});
}

TEST(RocketEmulatorErrors, WeightReuseOnFirstTask) {
  SmallJob j;
  j.set(abi::reg::CNA_CBUF_CON0, j.get(abi::reg::CNA_CBUF_CON0) | abi::fld::CBUF_CON0_WEIGHT_REUSE(1));
  expect_error(j.run(), {"task 0", "WEIGHT_REUSE", "first task"});
}

TEST(RocketEmulatorErrors, UnsupportedFeaturesAreNamed) {
  SmallJob j;
  j.set(abi::reg::DPU_BS_OW_OP, 3);
  expect_error(j.run(), {"task 0", "DPU_BS_OW_OP"});
}

}  // namespace
}  // namespace opal::rocket
