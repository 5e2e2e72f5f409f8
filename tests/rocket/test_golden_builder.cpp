// The register-command builder against Mesa's golden streams: for every case,
// the regcmd entries (raw with the golden fake addresses, and relocated by
// buffer + offset with other addresses), the packed weight/bias/input bytes,
// the BO sizes and the task/job structure must equal what Mesa submitted.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backends/rocket/abi/regcmd.h"
#include "backends/rocket/replay/sha256.h"
#include "rocket/golden_support.h"

namespace opal::rocket {
namespace {

using test::golden_case_names;
using test::load_case;
using test::read_golden_file;

std::vector<uint8_t> entry_bytes(const std::vector<uint64_t>& entries) {
  std::vector<uint8_t> out(entries.size() * 8);
  for (size_t i = 0; i < entries.size(); i++)
    for (int b = 0; b < 8; b++) out[i * 8 + b] = uint8_t(entries[i] >> (8 * b));
  return out;
}

class GoldenBuilder : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenBuilder, RegcmdStreamMatchesMesaWithGoldenAddresses) {
  const GoldenCase c = load_case(GetParam());
  const ReplayResult r = replay_case(c, Policy::Mesa, 0x10000000);
  std::vector<uint8_t> golden;
  ASSERT_TRUE(read_golden_file(c, "regcmd.bin", golden));
  const std::vector<uint8_t> mine = entry_bytes(r.regcmd.entries);
  ASSERT_EQ(mine.size(), golden.size());
  for (size_t i = 0; i < golden.size() / 8; i++) {
    uint64_t g = 0, m = 0;
    for (int b = 7; b >= 0; b--) g = (g << 8) | golden[i * 8 + b], m = (m << 8) | mine[i * 8 + b];
    ASSERT_EQ(m, g) << fmt::format("entry {} ({}): opal 0x{:016x} mesa 0x{:016x}", i,
                                   abi::register_name(uint16_t(g & 0xffff)), m, g);
  }
  ASSERT_TRUE(read_golden_file(c, "regcmd_bo.bin", golden));
  EXPECT_EQ(r.regcmd.bytes, golden) << "regcmd BO layout (64-byte aligned tasks, chained tails)";
}

TEST_P(GoldenBuilder, RegcmdStreamMatchesMesaRelocatedByBufferAndOffset) {
  const GoldenCase c = load_case(GetParam());
  // Real-kernel-like placement: first-fit from IOVA 0.
  const ReplayResult r = replay_case(c, Policy::Mesa, 0);
  const auto& tasks = c.json.at("tasks");
  size_t flat = 0;
  ASSERT_EQ(tasks.size(), r.compiled.plan.tasks.size());
  for (size_t t = 0; t < tasks.size(); t++) {
    const auto& entries = tasks[t].at("entries");
    ASSERT_EQ(entries.size(), r.regcmd.counts[t]);
    for (const auto& e : entries) {
      uint64_t g = std::stoull(e.at("raw").get<std::string>(), nullptr, 16);
      if (e.contains("address") && e.at("address").is_object()) {  // else "null (0: unused)"
        const auto& a = e.at("address");
        const uint32_t value = iova_of(r.bos, a.at("bo_role").get<std::string>()) + a.at("offset").get<uint32_t>();
        g = (g & ~(uint64_t(0xffffffff) << 16)) | (uint64_t(value) << 16);
      }
      ASSERT_EQ(r.regcmd.entries[flat], g)
          << fmt::format("task {} entry {} ({})", t, e.at("i").get<int>(), e.at("name").get<std::string>());
      flat++;
    }
  }
}

TEST_P(GoldenBuilder, PackedBuffersMatchMesa) {
  const GoldenCase c = load_case(GetParam());
  const ReplayResult r = replay_case(c, Policy::Mesa, 0x10000000);
  const auto& bins = c.json.at("binaries");
  std::vector<uint8_t> golden;
  if (read_golden_file(c, "weights.bin", golden)) EXPECT_EQ(r.compiled.weights, golden) << "weights.bin";
  else  // omitted from the shared folder for size: compare the recorded digest
    EXPECT_EQ(sha256_hex(r.compiled.weights), bins.at("weights.bin").at("sha256").get<std::string>());
  EXPECT_EQ(r.compiled.weights.size(), bins.at("weights.bin").at("bytes").get<size_t>());
  ASSERT_TRUE(read_golden_file(c, "biases.bin", golden));
  const std::vector<uint8_t> biases(
      reinterpret_cast<const uint8_t*>(r.compiled.biases.data()),
      reinterpret_cast<const uint8_t*>(r.compiled.biases.data()) + r.compiled.biases.size() * 4);
  EXPECT_EQ(biases, golden) << "biases.bin";
  ASSERT_TRUE(read_golden_file(c, "input.bin", golden));
  EXPECT_EQ(r.packed_input, golden) << "input.bin";
}

TEST_P(GoldenBuilder, BufferTableMatchesMesa) {
  const GoldenCase c = load_case(GetParam());
  const ReplayResult r = replay_case(c, Policy::Mesa, 0x10000000);
  const auto& bos = c.json.at("bos");
  ASSERT_EQ(bos.size(), r.bos.size());
  for (size_t i = 0; i < bos.size(); i++) {
    EXPECT_EQ(r.bos[i].role, bos[i].at("role").get<std::string>());
    EXPECT_EQ(r.bos[i].size, bos[i].at("size").get<uint32_t>()) << bos[i].at("role");
    EXPECT_EQ(fmt::format("0x{:08x}", r.bos[i].iova), bos[i].at("iova").get<std::string>()) << bos[i].at("role");
  }
}

TEST_P(GoldenBuilder, TaskAndJobStructureMatchMesa) {
  const GoldenCase c = load_case(GetParam());
  const ReplayResult r = replay_case(c, Policy::Mesa, 0x10000000);
  const auto& submit = c.json.at("submit");
  const auto& jobs = submit.at("jobs");
  ASSERT_EQ(r.jobs.size(), jobs.size());
  for (size_t j = 0; j < jobs.size(); j++) {
    const auto& tasks = jobs[j].at("tasks");
    ASSERT_EQ(r.jobs[j].tasks.size(), tasks.size()) << "job " << j;
    for (size_t t = 0; t < tasks.size(); t++) {
      EXPECT_EQ(fmt::format("0x{:08x}", r.jobs[j].tasks[t].regcmd_iova), tasks[t].at("regcmd").get<std::string>());
      EXPECT_EQ(r.jobs[j].tasks[t].regcmd_count, tasks[t].at("regcmd_count").get<uint32_t>());
    }
    ASSERT_EQ(r.jobs[j].in_bo_handles.size(), jobs[j].at("in_bo_handles").size());
    EXPECT_EQ(r.jobs[j].in_bo_handles[0], jobs[j].at("in_bo_handles")[0].at("handle").get<uint32_t>());
    ASSERT_EQ(r.jobs[j].out_bo_handles.size(), jobs[j].at("out_bo_handles").size());
    EXPECT_EQ(r.jobs[j].out_bo_handles[0], jobs[j].at("out_bo_handles")[0].at("handle").get<uint32_t>());
  }
  // Tiling per task.
  const auto& tasks = c.json.at("tasks");
  ASSERT_EQ(r.compiled.plan.tasks.size(), tasks.size());
  EXPECT_EQ(r.compiled.plan.weights_resident, c.json.at("mesa").at("reuse_weights_cbuf").get<bool>());
  for (size_t t = 0; t < tasks.size(); t++) {
    const auto& tiling = tasks[t].at("tiling");
    const auto& split = tasks[t].at("split_task_struct");
    const TaskTile& mine = r.compiled.plan.tasks[t];
    EXPECT_EQ(mine.top_row, tiling.at("input_rows_mesa_height")[0].get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.bottom_row, tiling.at("input_rows_mesa_height")[1].get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.out_height, tiling.at("output_height").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.input_offset, tiling.at("input_offset_bytes").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.output_offset, tiling.at("output_offset_bytes").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.data_banks, tiling.at("data_banks").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.weight_banks, tiling.at("weight_banks").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.weight_reuse, tiling.at("weight_reuse_bit").get<bool>()) << "task " << t;
    EXPECT_EQ(mine.overlap_rows, split.at("num_overlap_slices").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.retain_rows, split.at("num_retain_slices").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.pad_top, split.at("pad_top").get<unsigned>()) << "task " << t;
    EXPECT_EQ(mine.pad_bottom, split.at("pad_bottom").get<unsigned>()) << "task " << t;
  }
}

TEST_P(GoldenBuilder, OutCvtMultiplierApproximatesTheConvScale) {
  const GoldenCase c = load_case(GetParam());
  const OutCvt cvt = mesa_out_cvt(c.op.quant, 0);
  const double conv_scale = c.json.at("quantization").at("conv_scale_f32").get<double>();
  const double effective = double(cvt.scale) / double(uint64_t(1) << cvt.shift);
  // 15 significant bits, rounded up by one unit: relative error below 2^-13.
  EXPECT_NEAR(effective / conv_scale, 1.0, 1.0 / 8192);
  EXPECT_EQ(c.json.at("quantization").at("truncate_bits").get<unsigned>(), mesa_truncate_bits(c.op.quant.weight_scale));
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenBuilder, ::testing::ValuesIn(golden_case_names()),
                         [](const auto& info) { return info.param; });

TEST(RocketGoldenData, HostDataRegenerationMatchesRecordedDigests) {
  // load_case throws if any regenerated host tensor's sha256 differs.
  for (const std::string& name : golden_case_names()) EXPECT_NO_THROW(load_case(name)) << name;
}

TEST(RocketSha256, KnownVectors) {
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace opal::rocket
