// The host GEMM path (backends/rocket/host/npu_gemm.h) through the emulator:
// results equal the scheme's math computed here from the quantized operands
// (int8 x int8 summed exactly, times the two scales), for unaligned shapes,
// N tiled in a core, N split across three cores, N sliced at 8192 and K cut
// into segments, with one or two int8 planes per operand (each plane product
// weighted 254^-lo planes); faults (driver errors, dropped jobs, timeouts)
// surface as opal::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/rocket/driver/emulator/emulator_driver.h"
#include "backends/rocket/host/npu_gemm.h"
#include "backends/rocket/scheme/hadamard.h"
#include "core/error.h"
#include "rocket/fault_driver.h"

namespace opal::rocket {
namespace {

struct Problem {
  unsigned m, k, n;
  std::vector<float> x, w;  // x [m][k], w [n][k]
};

Problem random_problem(unsigned m, unsigned k, unsigned n, uint32_t seed) {
  Problem p{m, k, n, std::vector<float>(size_t(m) * k), std::vector<float>(size_t(n) * k)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : p.x) v = dist(rng);
  for (float& v : p.w) v = dist(rng) * 0.05f;
  if (m > 1) std::fill(p.x.begin() + k, p.x.begin() + 2 * k, 0.0f);  // an all-zero row
  return p;
}

QuantizedMatrix quantize(const std::vector<float>& a, unsigned rows, unsigned k, const QuantScheme& scheme) {
  return quantize_matrix(rows, k, scheme, [&](unsigned r, float* dst) {
    std::copy(a.begin() + size_t(r) * k, a.begin() + size_t(r + 1) * k, dst);
  });
}

// The activations quantized as the NPU path does (input planes instead of weight planes).
QuantizedMatrix quantize_input(const std::vector<float>& a, unsigned rows, unsigned k, QuantScheme scheme) {
  scheme.weight_planes = scheme.input_planes;
  return quantize(a, rows, k, scheme);
}

// y[m][n] = sum over scale groups g and plane products (a, b) (hi x hi, hi x lo,
// lo x hi; not lo x lo) of (sum_{k in g} qx_a * qw_b) * sx[m][g] * sw[n][g] / 254^(a+b),
// the inner sums exact.
std::vector<float> scheme_reference(const Problem& p, const QuantizedMatrix& qx, const QuantizedMatrix& qw) {
  std::vector<float> y(size_t(p.m) * p.n);
  const unsigned G = qw.scale_groups(), kp = qw.k_padded;
  const size_t x_plane = size_t(p.m) * kp, w_plane = size_t(p.n) * kp;
  for (unsigned i = 0; i < p.m; ++i)
    for (unsigned j = 0; j < p.n; ++j) {
      double sum = 0;
      for (unsigned a = 0; a < qx.planes(); ++a)
        for (unsigned b = 0; b < qw.planes(); ++b) {
          if (a + b == 2) continue;
          for (unsigned g = 0; g < G; ++g) {
            const unsigned k0 = G == 1 ? 0 : qw.groups[g].k0, k1 = G == 1 ? kp : k0 + qw.groups[g].k;
            int64_t acc = 0;
            for (unsigned t = k0; t < k1; ++t)
              acc += int64_t(qx.q[a * x_plane + size_t(i) * kp + t]) * qw.q[b * w_plane + size_t(j) * kp + t];
            sum += double(acc) * qx.scales[size_t(i) * G + g] * qw.scales[size_t(j) * G + g] / std::pow(254.0, a + b);
          }
        }
      y[size_t(i) * p.n + j] = float(sum);
    }
  return y;
}

std::vector<std::unique_ptr<Driver>> emulators(unsigned n) {
  std::vector<std::unique_ptr<Driver>> d;
  EmulatorOptions o;
  o.require_resident_weights = true;       // Opal's tiling never overflows the weight banks
  o.reject_wrapped_surface_stride = true;  // M is padded to a multiple of 4
  for (unsigned i = 0; i < n; ++i) d.push_back(std::make_unique<EmulatorDriver>(o));
  return d;
}

std::vector<Driver*> ptrs(const std::vector<std::unique_ptr<Driver>>& d) {
  std::vector<Driver*> p;
  for (const auto& x : d) p.push_back(x.get());
  return p;
}

// Returns the tasks of the second run.
unsigned check_gemm(unsigned m, unsigned k, unsigned n, unsigned cores, unsigned min_tasks = 1, unsigned group = 0,
                    bool rotate = false, Precision precision = Precision::W8A8) {
  SCOPED_TRACE(testing::Message() << "M=" << m << " K=" << k << " N=" << n << " cores=" << cores << " group=" << group
                                  << " rotate=" << rotate << " " << precision_name(precision));
  const Problem p = random_problem(m, k, n, m * 7919u + k * 31u + n);
  const QuantScheme scheme = make_scheme(k, rotate, group, precision);
  const QuantizedMatrix qx = quantize_input(p.x, m, k, scheme), qw = quantize(p.w, n, k, scheme);
  auto drivers = emulators(cores);
  NpuWeights weights(ptrs(drivers), qw);
  ScratchPool scratch;
  NpuGemm gemm(weights, m, scratch, 1.0);
  std::vector<float> y(size_t(m) * n, -1.0f);
  gemm.run(p.x.data(), k, y.data(), n);
  const std::vector<float> want = scheme_reference(p, qx, qw);
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (!(std::fabs(y[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i]))) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": NPU " << y[i] << ", scheme " << want[i];
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(gemm.last_run().tasks, min_tasks);
  EXPECT_EQ(gemm.last_run().submits, unsigned(weights.slices().size()));
  // Every driver that holds a slice ran tasks with int32 output.
  for (const auto& s : weights.slices()) {
    auto& emu = static_cast<EmulatorDriver&>(*s.driver).emulator();
    EXPECT_FALSE(emu.tasks().empty());
    if (!emu.tasks().empty()) {
      EXPECT_TRUE(emu.tasks().back().int32_output);
    }
  }
  // Running again gives the same result (scratch reuse, sentinels rewritten).
  std::vector<float> y2(y.size());
  gemm.run(p.x.data(), k, y2.data(), n);
  EXPECT_EQ(y, y2);
  return gemm.last_run().tasks;
}

TEST(RowQuant, ScaleIsMaxOver127AndZeroRowsStayZero) {
  const float x[5] = {0.5f, -2.54f, 1.0f, 0.0f, 2.54f};
  int8_t q[5];
  const float s = quantize_row_int8(x, 5, q);
  EXPECT_FLOAT_EQ(s, 2.54f / 127.0f);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[4], 127);
  EXPECT_EQ(q[2], 50);  // 1.0 / 0.02 = 50
  EXPECT_EQ(q[0], 25);
  EXPECT_EQ(q[3], 0);
  const float z[3] = {0, 0, 0};
  EXPECT_EQ(quantize_row_int8(z, 3, q), 0.0f);
  EXPECT_EQ(q[0], 0);
}

TEST(RowQuant, ResidualPlaneAddsSevenBits) {
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(1000);
  for (float& v : x) v = dist(rng);
  x[7] = 6.0f;  // the row maximum
  std::vector<int8_t> hi(x.size()), lo(x.size()), hi_only(x.size());
  const float s = quantize_row_int8(x.data(), int64_t(x.size()), hi.data(), lo.data());
  EXPECT_EQ(s, quantize_row_int8(x.data(), int64_t(x.size()), hi_only.data()));
  EXPECT_EQ(hi, hi_only);  // the hi plane is the plain int8 quantization
  double max_hi = 0, max_both = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::abs(int(lo[i])), 127);
    max_hi = std::max(max_hi, std::fabs(double(x[i]) - double(s) * hi[i]));
    max_both = std::max(max_both, std::fabs(double(x[i]) - double(s) * (hi[i] + lo[i] / 254.0)));
  }
  EXPECT_LE(max_hi, s / 2 * 1.0001);
  EXPECT_LE(max_both, s / 508 * 1.01);  // half a step of the lo plane
  EXPECT_GT(max_hi, 50 * max_both);
  const float z[3] = {0, 0, 0};
  int8_t zq[3], zl[3] = {1, 1, 1};
  EXPECT_EQ(quantize_row_int8(z, 3, zq, zl), 0.0f);
  EXPECT_EQ(zl[0], 0);
}

TEST(RowQuant, PrecisionNamesAndPlanes) {
  for (Precision p : {Precision::W8A8, Precision::W8A16, Precision::W16A8, Precision::W16A16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  EXPECT_THROW(parse_precision("int16"), Error);
  EXPECT_EQ(plane_terms(1, 1).size(), 1u);
  EXPECT_EQ(plane_terms(2, 1).size(), 2u);
  EXPECT_EQ(plane_terms(1, 2).size(), 2u);
  EXPECT_EQ(plane_terms(2, 2).size(), 3u);  // lo x lo dropped
  EXPECT_THROW(plane_terms(3, 1), Error);
  const QuantScheme s = make_scheme(64, false, 0, Precision::W8A16);
  EXPECT_EQ(s.input_planes, 2u);
  EXPECT_EQ(s.weight_planes, 1u);
}

TEST(Split, KSegmentsAreMultiplesOf32AndAtMost8192) {
  EXPECT_EQ(split_k(256).size(), 1u);
  EXPECT_EQ(split_k(8192).size(), 1u);
  for (unsigned k : {8224u, 11008u, 16384u, 20000u / 32 * 32}) {
    const auto s = split_k(k);
    unsigned next = 0;
    for (const KSegment& g : s) {
      EXPECT_EQ(g.k0, next);
      EXPECT_EQ(g.k0 % 32, 0u);
      EXPECT_EQ(g.k % 32, 0u);
      EXPECT_LE(g.k, 8192u);
      next += g.k;
    }
    EXPECT_EQ(next, k);
    EXPECT_EQ(s.size(), (k + 8191) / 8192);
  }
  EXPECT_THROW(split_k(100), Error);
  const auto n = split_n(100, 3);  // ceil(100/3) = 34 -> 64 per part: only two parts are needed
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0], std::make_pair(0u, 64u));
  EXPECT_EQ(n[1], std::make_pair(64u, 36u));
  const auto n3 = split_n(256, 3);  // 86 -> 96
  ASSERT_EQ(n3.size(), 3u);
  EXPECT_EQ(n3[2], std::make_pair(192u, 64u));
}

TEST(NpuGemm, MatchesTheSchemeOnUnalignedShapes) {
  check_gemm(1, 64, 32, 1);   // decode-sized: M padded to 4
  check_gemm(5, 100, 70, 1);  // K padded to 128, N not a multiple of 32
  check_gemm(33, 256, 96, 1);
}

TEST(NpuGemm, TilesNWhenWeightsExceedTheCbuf) {
  // 4096 x 256 int8 = 1 MiB of weights: several N tiles, each resident.
  check_gemm(40, 4096, 256, 1, 2);
}

TEST(NpuGemm, SplitsNAcrossThreeCores) { check_gemm(36, 512, 200, 3, 3); }

TEST(NpuGemm, SegmentsKAbove8192) {
  // 8200 -> padded 8224 -> two segments with int32 partials summed on the host.
  check_gemm(4, 8200, 40, 1, 2);
}

TEST(NpuGemm, GroupScalesAndRotation) {
  check_gemm(12, 256, 64, 1, 2, 128);       // two scale groups per row: two K segments
  check_gemm(12, 300, 64, 2, 2, 64);        // K 300 -> 320: five groups, the last one short
  check_gemm(8, 384, 40, 1, 1, 0, true);    // rotation over blocks of 128
  check_gemm(8, 512, 40, 1, 2, 256, true);  // both
}

TEST(NpuGemm, PlaneProductsRunAsExtraInt8Gemms) {
  for (Precision pr : {Precision::W8A16, Precision::W16A8, Precision::W16A16}) {
    const unsigned terms = unsigned(plane_terms(input_planes(pr), weight_planes(pr)).size());
    const unsigned base = check_gemm(5, 100, 70, 1, 1, 0, false, Precision::W8A8);
    EXPECT_EQ(check_gemm(5, 100, 70, 1, 1, 0, false, pr), terms * base);
    check_gemm(36, 512, 200, 3, 3 * terms, 0, true, pr);  // N split over 3 cores, rotation
    check_gemm(4, 8200, 40, 1, 2 * terms, 0, false, pr);  // K segments
    check_gemm(12, 300, 64, 2, 2, 64, false, pr);         // scale groups
  }
}

// What the planes buy: the NPU result against the float matmul, per precision.
TEST(NpuGemm, SixteenBitPlanesApproachTheFloatProduct) {
  const unsigned m = 16, k = 512, n = 64;
  const Problem p = random_problem(m, k, n, 77);
  double ref_energy = 0;
  std::vector<double> ref(size_t(m) * n);
  for (unsigned i = 0; i < m; ++i)
    for (unsigned j = 0; j < n; ++j) {
      double s = 0;
      for (unsigned t = 0; t < k; ++t) s += double(p.x[size_t(i) * k + t]) * p.w[size_t(j) * k + t];
      ref[size_t(i) * n + j] = s;
      ref_energy += s * s;
    }
  auto nmse = [&](Precision pr) {
    auto drivers = emulators(1);
    NpuWeights w(ptrs(drivers), quantize(p.w, n, k, make_scheme(k, true, 0, pr)));
    ScratchPool scratch;
    NpuGemm gemm(w, m, scratch, 1.0);
    std::vector<float> y(size_t(m) * n);
    gemm.run(p.x.data(), k, y.data(), n);
    double e = 0;
    for (size_t i = 0; i < y.size(); ++i) e += (y[i] - ref[i]) * (y[i] - ref[i]);
    return e / ref_energy;
  };
  const double e8 = nmse(Precision::W8A8), e_a16 = nmse(Precision::W8A16), e_w16 = nmse(Precision::W16A8),
               e16 = nmse(Precision::W16A16);
  EXPECT_LT(e8, 1e-3);
  EXPECT_LT(e_a16, e8);  // each split removes that operand's share of the error
  EXPECT_LT(e_w16, e8);
  EXPECT_LT(e16, e8 / 1000);  // ~7 more bits on both sides: ~2^-14 of the int8 error energy
}

TEST(Quantization, SchemeRowsMatchTheDefinition) {
  // No rotation, no groups: one scale per row over the real K, zero padding.
  const Problem p = random_problem(3, 40, 1, 9);
  const QuantizedMatrix q = quantize(p.x, 3, 40, make_scheme(40, false, 0, Precision::W8A8));
  ASSERT_EQ(q.k_padded, 64u);
  ASSERT_EQ(q.scale_groups(), 1u);
  for (unsigned r = 0; r < 3; ++r) {
    int8_t want[40];
    EXPECT_EQ(q.scales[r], quantize_row_int8(p.x.data() + r * 40, 40, want));
    for (unsigned i = 0; i < 64; ++i) EXPECT_EQ(q.q[r * 64 + i], i < 40 ? want[i] : 0) << r << "," << i;
  }
  // Groups: scales per 32 channels.
  const QuantizedMatrix g = quantize(p.x, 3, 40, make_scheme(40, false, 32, Precision::W8A8));
  ASSERT_EQ(g.scale_groups(), 2u);
  int8_t tmp[32];
  EXPECT_EQ(g.scales[1], quantize_row_int8(p.x.data() + 32, 8, tmp));
  // The rotation is orthogonal: dot products and norms are kept.
  const Problem a = random_problem(2, 256, 1, 11);
  std::vector<float> u(a.x.begin(), a.x.begin() + 256), v(a.x.begin() + 256, a.x.end());
  v[17] = 40.0f;  // an outlier channel
  double dot = 0, nv = 0, vmax = 0;
  for (unsigned i = 0; i < 256; ++i) dot += double(u[i]) * v[i], nv += double(v[i]) * v[i];
  const unsigned block = rotation_block(256);
  EXPECT_EQ(block, 256u);
  rotate_row(u.data(), 256, block);
  rotate_row(v.data(), 256, block);
  double dot2 = 0, nv2 = 0;
  for (unsigned i = 0; i < 256; ++i)
    dot2 += double(u[i]) * v[i], nv2 += double(v[i]) * v[i], vmax = std::max(vmax, double(std::fabs(v[i])));
  EXPECT_NEAR(dot2, dot, 1e-3 * std::sqrt(nv));
  EXPECT_NEAR(nv2, nv, 1e-4 * nv);
  EXPECT_LT(vmax, 10.0);  // the outlier of 40 is spread over the block
  EXPECT_EQ(rotation_block(96), 32u);
  EXPECT_EQ(rotation_block(8192 + 32), 32u);
}

TEST(NpuGemm, SlicesNAbove8192) {
  const unsigned k = 32, n = 8192 + 64;
  auto drivers = emulators(1);
  const std::vector<float> ones(size_t(n) * k, 1.0f);
  const QuantizedMatrix q = quantize(ones, n, k, QuantScheme{});
  NpuWeights w(ptrs(drivers), q);
  ASSERT_EQ(w.slices().size(), 2u);
  EXPECT_EQ(w.slices()[1].n0, 8192u);
  EXPECT_EQ(w.slices()[1].slot, 1u);
  ScratchPool scratch;
  NpuGemm gemm(w, 4, scratch, 1.0);
  std::vector<float> x(4 * k, 1.0f), y(size_t(4) * n, 0.0f);
  gemm.run(x.data(), k, y.data(), n);
  // x and w quantize to 127 with scale 1/127: y = 32 * 127 * 127 / 127^2 = 32.
  for (unsigned j : {0u, 8191u, 8192u, n - 1}) EXPECT_FLOAT_EQ(y[size_t(3) * n + j], 32.0f) << j;
}

TEST(NpuGemm, DriverFaultsBecomeErrors) {
  const Problem p = random_problem(8, 64, 32, 5);
  const QuantizedMatrix qw = quantize(p.w, 32, 64, QuantScheme{});
  for (FaultKind kind : {FaultKind::SubmitFails, FaultKind::JobDropped, FaultKind::PrepTimesOut}) {
    FaultDriver fd(kind);
    NpuWeights w({&fd}, qw);
    ScratchPool scratch;
    NpuGemm gemm(w, 8, scratch, 0.1);
    std::vector<float> y(8 * 32);
    fd.armed = true;
    try {
      gemm.run(p.x.data(), 64, y.data(), 32);
      ADD_FAILURE() << "no error for fault " << int(kind);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (kind == FaultKind::JobDropped) {
        EXPECT_NE(msg.find("did not write the output"), std::string::npos) << msg;
      }
      if (kind == FaultKind::SubmitFails) {
        EXPECT_NE(msg.find("SUBMIT"), std::string::npos) << msg;
      }
      if (kind == FaultKind::PrepTimesOut) {
        EXPECT_NE(msg.find("PREP_BO"), std::string::npos) << msg;
      }
    }
    fd.armed = false;  // the same gemm works again once the fault is gone
    EXPECT_NO_THROW(gemm.run(p.x.data(), 64, y.data(), 32));
  }
}

}  // namespace
}  // namespace opal::rocket
