// Golden case loading, replay and the integer reference (see golden_case.h).
#include "backends/rocket/replay/golden_case.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "backends/rocket/replay/sha256.h"
#include "core/error.h"

namespace opal::rocket {
namespace {

uint32_t parse_hex(const nlohmann::json& v, const char* what) {
  if (!v.is_string()) fail("rocket golden: {} is not a hex string", what);
  return uint32_t(std::stoul(v.get<std::string>(), nullptr, 16));
}

float f32_from_bits(const nlohmann::json& v, const char* what) { return std::bit_cast<float>(parse_hex(v, what)); }

void check_sha(std::span<const uint8_t> bytes, const nlohmann::json& expected, const std::string& what) {
  const std::string got = sha256_hex(bytes);
  if (expected.is_string() && got != expected.get<std::string>())
    fail("rocket golden: regenerated {} has sha256 {}, case.json records {}", what, got, expected.get<std::string>());
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("rocket: cannot write {}", path);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) fail("rocket: write to {} failed", path);
}

}  // namespace

std::vector<uint32_t> xorshift32_draws(uint32_t seed, size_t count) {
  std::vector<uint32_t> out(count);
  uint32_t x = seed;
  for (size_t i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = x;
  }
  return out;
}

GoldenCase load_golden_case(const std::string& case_json_path) {
  std::ifstream f(case_json_path);
  if (!f) fail("rocket golden: cannot open {}", case_json_path);
  GoldenCase c;
  try {
    c.json = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("rocket golden: {} is not valid JSON: {}", case_json_path, e.what());
  }
  const nlohmann::json& j = c.json;
  try {
    c.name = j.at("name").get<std::string>();
    c.kind = j.at("kind").get<std::string>();
    c.dir = std::filesystem::path(case_json_path).parent_path().string();
    const auto& dims = j.at("mesa_tensor_dims");
    const auto& in = dims.at("input");
    const auto& out = dims.at("output");
    const auto& w = dims.at("weights");
    const auto& q = j.at("quantization");
    QuantParams qp;
    qp.input_scale = f32_from_bits(q.at("input").at("scale_f32_bits"), "input scale");
    qp.weight_scale = f32_from_bits(q.at("weights").at("scale_f32_bits"), "weight scale");
    qp.output_scale = f32_from_bits(q.at("output").at("scale_f32_bits"), "output scale");
    qp.input_zero_point = q.at("input").at("zero_point_uint8").get<uint8_t>();
    qp.weight_zero_point = q.at("weights").at("zero_point_uint8").get<uint8_t>();
    qp.output_zero_point = q.at("output").at("zero_point_uint8").get<uint8_t>();
    ConvOp op;
    op.in_width = in.at(1).get<unsigned>();
    op.in_height = in.at(2).get<unsigned>();
    op.in_channels = in.at(3).get<unsigned>();
    op.out_width = out.at(1).get<unsigned>();
    op.out_height = out.at(2).get<unsigned>();
    op.out_channels = out.at(3).get<unsigned>();
    op.kernel_width = w.at(1).get<unsigned>();
    op.kernel_height = w.at(2).get<unsigned>();
    op.stride = j.at("conv").at("stride").get<unsigned>();
    op.padding_same = j.at("conv").at("padding_same").get<bool>();
    op.quant = qp;
    c.op = op;
    if (c.kind == "gemm") {
      c.gemm_m = j.at("shape").at("M").get<unsigned>();
      c.gemm_k = j.at("shape").at("K").get<unsigned>();
      c.gemm_n = j.at("shape").at("N").get<unsigned>();
    }
    const auto& hd = j.at("host_data");
    const size_t in_bytes = size_t(op.in_width) * op.in_height * op.in_channels;
    const size_t w_bytes = size_t(op.out_channels) * op.taps() * op.in_channels;
    for (auto [key, dst, n] :
         {std::tuple{"input_uint8", &c.host_input, in_bytes}, std::tuple{"weights_uint8", &c.host_weights, w_bytes}}) {
      const auto draws = xorshift32_draws(parse_hex(hd.at(key).at("seed"), key), n);
      dst->resize(n);
      for (size_t i = 0; i < n; i++) (*dst)[i] = uint8_t(draws[i] >> 24);
      check_sha(*dst, hd.at(key).at("sha256"), key);
    }
    const auto bias_draws = xorshift32_draws(parse_hex(hd.at("bias_int32").at("seed"), "bias seed"), op.out_channels);
    c.host_bias.resize(op.out_channels);
    for (size_t i = 0; i < bias_draws.size(); i++) c.host_bias[i] = int32_t(bias_draws[i] >> 16) - 32768;
    check_sha({reinterpret_cast<const uint8_t*>(c.host_bias.data()), c.host_bias.size() * 4},
              hd.at("bias_int32").at("sha256"), "bias_int32");
  } catch (const nlohmann::json::exception& e) {
    fail("rocket golden: {}: missing or malformed field: {}", case_json_path, e.what());
  }
  return c;
}

ReplayResult replay_case(const GoldenCase& c, Policy policy, uint32_t iova_base) {
  ReplayResult r;
  ConvOp op = c.op;
  unsigned host_rows = op.in_height;
  if (c.kind == "gemm") {
    op = lower_gemm(c.gemm_m, c.gemm_k, c.gemm_n, c.op.quant, policy);
    host_rows = c.gemm_m;
  }
  r.compiled = compile_conv(op, policy, c.host_weights, c.host_bias);
  r.bos = mesa_bo_sequence(r.compiled, iova_base);
  r.regcmd = build_regcmd(r.compiled, addresses_of(r.bos), iova_of(r.bos, "regcmd"));
  r.packed_input = pack_input(op, c.host_input, host_rows);
  // Handles are 1, 2, ... in creation order, as in the golden ioctl log.
  uint32_t input_handle = 0, output_handle = 0;
  for (size_t i = 0; i < r.bos.size(); i++) {
    if (r.bos[i].role == "input") input_handle = uint32_t(i + 1);
    if (r.bos[i].role == "output") output_handle = uint32_t(i + 1);
  }
  r.jobs = make_jobs(r.compiled.plan, r.regcmd, iova_of(r.bos, "regcmd"), input_handle, output_handle);
  return r;
}

void write_replay_files(const ReplayResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("rocket: cannot create {}: {}", dir, ec.message());
  std::vector<uint8_t> regcmd(r.regcmd.entries.size() * 8);
  for (size_t i = 0; i < r.regcmd.entries.size(); i++)
    for (int b = 0; b < 8; b++) regcmd[i * 8 + b] = uint8_t(r.regcmd.entries[i] >> (8 * b));
  write_file(dir + "/regcmd.bin", regcmd);
  write_file(dir + "/weights.bin", r.compiled.weights);
  write_file(dir + "/biases.bin",
             {reinterpret_cast<const uint8_t*>(r.compiled.biases.data()), r.compiled.biases.size() * 4});
  write_file(dir + "/input.bin", r.packed_input);
}

EmulatedRun run_case_on_emulator(const GoldenCase& c, Policy policy, const EmulatorOptions& options) {
  EmulatedRun run;
  run.replay = replay_case(c, policy, 0x10000000);
  const ReplayResult& r = run.replay;
  EmulatorDriver driver(options);
  BoSpace& space = driver.space();
  uint32_t output_handle = 0;
  for (const BoPlacement& b : r.bos) {
    const BoInfo bo = space.create_at(b.iova, b.size);
    uint8_t* p = space.data(bo.handle);
    if (b.role == "weights") std::copy(r.compiled.weights.begin(), r.compiled.weights.end(), p);
    if (b.role == "biases") std::memcpy(p, r.compiled.biases.data(), r.compiled.biases.size() * 4);
    if (b.role == "input") std::copy(r.packed_input.begin(), r.packed_input.end(), p);
    if (b.role == "regcmd") std::copy(r.regcmd.bytes.begin(), r.regcmd.bytes.end(), p);
    if (b.role == "output") output_handle = bo.handle;
  }
  driver.submit(r.jobs);
  const uint8_t* out = space.data(output_handle);
  run.output_bo.assign(out, out + r.compiled.sizes.output);
  run.tasks = driver.emulator().tasks();
  run.warnings = driver.emulator().warnings();
  return run;
}

ReferenceOutput reference_output(const GoldenCase& c, Rounding rounding) {
  // Hardware frame: pixel p = row * W + col holds host element p (host is
  // [dims1][dims2][C]; for GEMM W = 1 and p = m; the conv cases are square).
  const ConvOp& op = c.op;
  const unsigned W = op.in_width, H = op.in_height, C = op.in_channels, N = op.out_channels;
  const unsigned KW = op.kernel_width, KH = op.kernel_height, S = op.stride;
  const unsigned rows = op.out_height, cols = op.out_width;
  const Padding pad = explicit_padding(op);
  const int in_off = int(op.quant.input_zero_point);
  const int w_off = int(op.quant.weight_zero_point);
  const unsigned truncate = mesa_truncate_bits(op.quant.weight_scale);
  const OutCvt cvt = mesa_out_cvt(op.quant, truncate);
  ReferenceOutput ref;
  ref.rows = rows;
  ref.cols = cols;
  ref.channels = N;
  ref.accumulators.assign(size_t(rows) * cols * N, 0);
  ref.output.assign(size_t(rows) * cols * N, 0);
  std::vector<int16_t> x(c.host_input.size()), w(c.host_weights.size());
  for (size_t i = 0; i < x.size(); i++) x[i] = int16_t(int(c.host_input[i]) - in_off);
  for (size_t i = 0; i < w.size(); i++) w[i] = int16_t(int(c.host_weights[i]) - w_off);
  for (unsigned r = 0; r < rows; r++)
    for (unsigned col = 0; col < cols; col++)
      for (unsigned n = 0; n < N; n++) {
        int64_t acc = 0;
        for (unsigned ky = 0; ky < KH; ky++)
          for (unsigned kx = 0; kx < KW; kx++) {
            const int iy = int(r * S + ky) - int(pad.top), ix = int(col * S + kx) - int(pad.left);
            if (iy < 0 || ix < 0 || iy >= int(H) || ix >= int(W)) continue;  // zero-point padding
            const int16_t* xv = &x[(size_t(iy) * W + ix) * C];
            const int16_t* wv = &w[((size_t(n) * KW + ky) * KH + kx) * C];
            for (unsigned k = 0; k < C; k++) acc += int32_t(xv[k]) * wv[k];
          }
        const int64_t sum =
            round_shift(acc, truncate, Rounding::HalfAwayFromZero) + int64_t(c.host_bias[n]) / (int64_t(1) << truncate);
        const size_t i = (size_t(r) * cols + col) * N + n;
        ref.accumulators[i] = int32_t(sum);
        ref.output[i] = out_cvt_int8(sum, cvt.scale, cvt.shift, int32_t(cvt.offset), rounding);
      }
  return ref;
}

}  // namespace opal::rocket
