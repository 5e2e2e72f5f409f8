// An LLM matmul Y[M,N] = X[M,K] W[N,K]^T on the RK3588 NPU, through the
// driver seam, with int8 operands and the exact int32 accumulator as output.
//
// Scheme (docs/backends/rocket.md):
//   weights     per output row n: s_w[n] = max_k |W[n,k]| / 127,
//               q_w[n,k] = round(W[n,k] / s_w[n]) in [-127, 127]; quantized once
//               at load, packed into 32x32 blocks, resident in one BO per core.
//   activations per input row m: s_x[m] = max_k |X[m,k]| / 127, same rounding,
//               at run time, packed NC1HWC2 (C2 = 16), rows padded to M' = align4(M).
//   rotation    optionally both operands are first rotated along K by the same
//               orthogonal block-Hadamard matrix (scheme/hadamard.h), which leaves
//               X W^T unchanged and makes per-row int8 more accurate.
//   planes      each operand is one int8 plane (8-bit) or two ("16-bit"): the hi
//               plane as above and a lo plane holding the rounding residual,
//               lo = round((v/s - hi) * 254) in [-127, 127], so v ~= s (hi + lo/254)
//               with |error| <= s/508 (about 15 bits). Every (input plane, weight
//               plane) product is its own int32 GEMM on the same int8 datapath,
//               combined on the host: acc_hh + (acc_hl + acc_lh) / 254; lo x lo
//               (~1/254^2 of the result) is not computed. Costs 2 (one operand
//               split) or 3 (both) GEMMs' MAC cycles; see Precision.
//   groups      optionally one scale per `group` channels of K for both operands
//               (group-wise W8A8): each group is its own K segment with int32
//               partials, Y = sum_g acc_g[m,n] * s_x[m,g] * s_w[n,g].
//   output      int32 acc[m,n] (DPU_DATA_FORMAT.OUT_PRECISION = int32, layout
//               [N'/4][M'][4]); Y[m,n] = acc[m,n] * s_x[m] * s_w[n] (summed over
//               the plane products, each weighted 254^-(lo planes in it)).
//   K           padded to a multiple of 32 with zeros; K > 8192 is cut into
//               segments of at most 8192 (multiples of 32), each its own
//               convolution reading the same packed input at a channel-surface
//               offset and writing its own int32 partials, summed on the host.
//   N           split across the drivers (one per NPU core) in multiples of 32,
//               and each driver's range into slices of at most 8192 (the DPU's
//               13-bit channel fields); each driver holds only its slices of every
//               weight (BOs cannot be shared between drivers). Inside a slice the
//               tiler (lower/tiling.h, Policy::Opal) tiles rows and N so every
//               task's weights are resident.
// A compiled NpuGemm owns its regcmd BOs and reuses per-core scratch BOs
// (input, output) that may be shared between gemms run one after another.
// Faults: a driver error, a PREP timeout or an output sentinel left
// untouched (SUBMIT swallows per-job errors) throw opal::Error.
// The shape of the scheme (precision and planes, K segments, N slices, the
// rotation) is scheme/gemm_scheme.h, shared with the performance model.
#pragma once
#include <array>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backends/rocket/driver/driver.h"
#include "backends/rocket/lower/tiling.h"
#include "backends/rocket/scheme/gemm_scheme.h"

namespace opal::rocket {

// Symmetric per-row int8 quantization: returns the scale (0 for an all-zero
// row, whose q are all 0); q[i] = clamp(round(x[i] / scale), -127, 127).
// With `lo`, also the residual plane lo[i] = round((x[i] / scale - q[i]) * kLoPlaneScale).
float quantize_row_int8(const float* x, int64_t n, int8_t* q, int8_t* lo = nullptr);

// A weight quantized under a scheme: q [planes][n][k_padded] (zero padding),
// scales [n][groups] with groups = split_k(k_padded, group or 8192); the lo
// plane (if any) shares the hi plane's scales.
struct QuantizedMatrix {
  unsigned k = 0, k_padded = 0, n = 0;
  QuantScheme scheme;
  std::vector<KSegment> groups;  // the K segments; each has its own scales when scheme.group > 0
  std::vector<int8_t> q;
  std::vector<float> scales;  // [n][scale_groups()]
  unsigned scale_groups() const { return scheme.group ? unsigned(groups.size()) : 1u; }
  unsigned planes() const { return scheme.weight_planes; }
};
// row(r, dst) writes row r (k floats) into dst.
template <typename RowFn>
QuantizedMatrix quantize_matrix(unsigned n, unsigned k, const QuantScheme& scheme, RowFn&& row);
// Quantizes one row (k floats) under the scheme into `planes` (1 or 2) int8
// planes of k_padded values, plane p at q + p * plane_stride, and scales
// [scale_groups]; work holds k_padded floats.
void quantize_operand_row(const float* x, unsigned k, const QuantScheme& scheme, const std::vector<KSegment>& groups,
                          float* work, int8_t* q, float* scales, unsigned planes = 1, size_t plane_stride = 0);

// One weight matrix resident on the NPU: per driver its N slice, per K segment
// and weight plane the packed 32x32 blocks, in one BO (FINI'd once).
class NpuWeights {
 public:
  struct Slice {
    Driver* driver = nullptr;
    unsigned slot = 0;       // index among this driver's slices
    unsigned n0 = 0, n = 0;  // output rows [n0, n0 + n)
    BoInfo bo;
    std::vector<uint32_t> seg_offset;  // byte offset of each (K segment, plane)'s blocks: [segment * planes + plane]
  };
  NpuWeights(const std::vector<Driver*>& drivers, const QuantizedMatrix& m);
  ~NpuWeights();
  NpuWeights(const NpuWeights&) = delete;
  NpuWeights& operator=(const NpuWeights&) = delete;

  unsigned k() const { return k_; }
  unsigned k_padded() const { return k_padded_; }
  unsigned n() const { return n_; }
  const QuantScheme& scheme() const { return scheme_; }
  const std::vector<KSegment>& segments() const { return segments_; }
  unsigned scale_groups() const { return scale_groups_; }
  unsigned planes() const { return scheme_.weight_planes; }
  const std::vector<Slice>& slices() const { return slices_; }
  const std::vector<float>& scales() const { return scales_; }  // [n][scale_groups]
  uint64_t npu_bytes() const;

 private:
  unsigned k_, k_padded_, n_, scale_groups_;
  QuantScheme scheme_;
  std::vector<KSegment> segments_;
  std::vector<Slice> slices_;
  std::vector<float> scales_;
};

template <typename RowFn>
QuantizedMatrix quantize_matrix(unsigned n, unsigned k, const QuantScheme& scheme, RowFn&& row) {
  QuantizedMatrix m;
  m.k = k;
  m.k_padded = (k + 31) / 32 * 32;
  m.n = n;
  m.scheme = scheme;
  m.groups = split_k(m.k_padded, scheme.group ? scheme.group : 8192);
  const size_t plane = size_t(n) * m.k_padded;
  m.q.assign(plane * m.planes(), 0);
  m.scales.assign(size_t(n) * m.scale_groups(), 0.0f);
  std::vector<float> x(k), work(m.k_padded);
  for (unsigned r = 0; r < n; ++r) {
    row(r, x.data());
    quantize_operand_row(x.data(), k, scheme, m.groups, work.data(), m.q.data() + size_t(r) * m.k_padded,
                         m.scales.data() + size_t(r) * m.scale_groups(), m.planes(), plane);
  }
  return m;
}

// A BO that grows: a gemm compiled for a larger size gets a new, larger BO;
// gemms compiled earlier keep the old one alive (their regcmds hold its IOVA).
class ScratchBo {
 public:
  ScratchBo(Driver& d, uint64_t size);
  ~ScratchBo();
  ScratchBo(const ScratchBo&) = delete;
  ScratchBo& operator=(const ScratchBo&) = delete;
  const BoInfo& info() const { return info_; }
  uint8_t* cpu() const { return cpu_; }

 private:
  Driver& driver_;
  BoInfo info_;
  uint8_t* cpu_ = nullptr;
};

// Per-driver scratch input/output BOs shared by the gemms of one executor
// (they run one after another). `slot` tells apart the slices of one gemm on
// the same driver, which are in flight together.
class ScratchPool {
 public:
  std::shared_ptr<ScratchBo> get(Driver& d, bool output, unsigned slot, uint64_t size);

 private:
  struct Entry {
    Driver* driver;
    bool output;
    unsigned slot;
    std::shared_ptr<ScratchBo> bo;
  };
  std::vector<Entry> entries_;
};

// The phases of one run(), in order: quantize + pack the activations on the
// host; hand the inputs and output sentinels to each core and SUBMIT; wait
// for the outputs (PREP_BO); check, sum and dequantize the int32 outputs.
inline constexpr const char* kGemmPhases[] = {"prepare", "submit", "wait", "unpack"};
inline constexpr size_t kGemmPhaseCount = std::size(kGemmPhases);

// Work counted by the last run(), for the performance model and tests.
struct GemmRunInfo {
  unsigned submits = 0, jobs = 0, tasks = 0;
  // With run(..., timed = true): phase i of kGemmPhases ran from t_ns[i] to
  // t_ns[i + 1], on the clock of RunHooks::node_phase (phase_clock_ns).
  std::array<int64_t, kGemmPhaseCount + 1> t_ns{};
  bool timed = false;
};

class NpuGemm {
 public:
  // Builds the tiling and regcmd streams of every (driver, K segment) for M rows.
  NpuGemm(const NpuWeights& w, unsigned m, ScratchPool& scratch, double timeout_s);
  ~NpuGemm();
  NpuGemm(const NpuGemm&) = delete;
  NpuGemm& operator=(const NpuGemm&) = delete;

  // x: M rows of K floats (row stride x_stride floats); y: M rows, N floats
  // written at stride y_stride. Allocation-free. Throws opal::Error on a fault.
  // `timed`: record the phase boundaries in last_run().t_ns.
  void run(const float* x, int64_t x_stride, float* y, int64_t y_stride, bool timed = false);

  unsigned m() const { return m_; }
  unsigned m_padded() const { return m_padded_; }
  const GemmRunInfo& last_run() const { return info_; }
  // The tile plan of one (slice, segment, plane product) unit, in submission order.
  const std::vector<TilePlan>& plans() const { return plans_; }

 private:
  struct Unit {  // one plane product of one K segment on one driver
    size_t slice = 0, segment = 0;
    PlaneTerm term;
    uint64_t out_offset = 0;  // in the output scratch BO
    uint64_t out_bytes = 0;
    std::vector<abi::JobDesc> jobs;
  };
  struct SliceRun {  // one weight slice on its driver
    Driver* driver = nullptr;
    std::shared_ptr<ScratchBo> input, output;
    BoInfo regcmd, bias;
    std::vector<Unit> units;
    std::vector<abi::JobDesc> jobs;  // every unit's jobs, in order: one SUBMIT per run
  };
  const NpuWeights& w_;
  unsigned m_, m_padded_;
  double timeout_s_;
  std::vector<SliceRun> runs_;
  std::vector<TilePlan> plans_;
  std::vector<PlaneTerm> terms_;
  std::vector<int8_t> xq_;       // quantized activations [planes][M'][K']
  std::vector<float> xrow_;      // one activation row, padded and rotated
  std::vector<float> xscale_;    // [M][scale groups]
  std::vector<uint8_t> packed_;  // NC1HWC2 input
  std::vector<float> acc_;       // [M][slice n] dequantized partial sums
  GemmRunInfo info_;
};

}  // namespace opal::rocket
