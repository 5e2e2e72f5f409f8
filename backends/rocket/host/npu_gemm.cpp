// Host side of one NPU matmul (see npu_gemm.h for the scheme).
#include "backends/rocket/host/npu_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/rocket/layout/packing.h"
#include "backends/rocket/lower/regcmd_builder.h"
#include "backends/rocket/scheme/hadamard.h"
#include "core/error.h"
#include "graph/backend.h"

namespace opal::rocket {
namespace {

constexpr int32_t kSentinel = std::numeric_limits<int32_t>::max();  // |acc| < 2^27 for K <= 8192
constexpr uint64_t align64(uint64_t v) { return (v + 63) / 64 * 64; }

ConvOp gemm_op(unsigned m_padded, unsigned k, unsigned n) {
  QuantParams q;  // symmetric int8: zero points 0x80 (signed 0), weight scale 1 (no truncate whitelist hit)
  ConvOp op = ConvOp::gemm(m_padded, k, n, q);
  op.int32_output = true;
  return op;
}

// Bytes of one (slice, segment) output: [align32(n)/4][M'][4] int32.
uint64_t output_bytes(unsigned n, unsigned m_padded) { return uint64_t(align_up(n, 32)) / 4 * m_padded * 16; }

// Byte offset of element (row, channel) in an int32 output.
uint64_t output_index(unsigned row, unsigned ch, unsigned m_padded) {
  return (uint64_t(ch / 4) * m_padded + row) * 16 + (ch % 4) * 4;
}

}  // namespace

float quantize_row_int8(const float* x, int64_t n, int8_t* q, int8_t* lo) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (!(amax > 0.0f) || !std::isfinite(amax)) {
    std::fill(q, q + n, int8_t(0));
    if (lo) std::fill(lo, lo + n, int8_t(0));
    return amax > 0.0f ? std::numeric_limits<float>::quiet_NaN() : 0.0f;  // non-finite input poisons the row
  }
  const float inv = 127.0f / amax;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * inv;
    const float hi = std::clamp(std::round(v), -127.0f, 127.0f);
    q[i] = int8_t(hi);
    // |v - hi| <= 0.5, so the residual plane stays within [-127, 127].
    if (lo) lo[i] = int8_t(std::clamp(std::round((v - hi) * kLoPlaneScale), -127.0f, 127.0f));
  }
  return amax / 127.0f;
}

void quantize_operand_row(const float* x, unsigned k, const QuantScheme& scheme, const std::vector<KSegment>& groups,
                          float* work, int8_t* q, float* scales, unsigned planes, size_t plane_stride) {
  if (planes < 1 || planes > 2) fail("rocket: {} int8 planes per operand (1 or 2)", planes);
  const unsigned kp = groups.back().k0 + groups.back().k;
  std::copy(x, x + k, work);
  std::fill(work + k, work + kp, 0.0f);
  if (scheme.rotation_block) rotate_row(work, kp, scheme.rotation_block);
  int8_t* lo = planes == 2 ? q + plane_stride : nullptr;
  if (!scheme.group) {
    scales[0] = quantize_row_int8(work, kp, q, lo);
    return;
  }
  for (size_t g = 0; g < groups.size(); ++g)
    scales[g] = quantize_row_int8(work + groups[g].k0, groups[g].k, q + groups[g].k0, lo ? lo + groups[g].k0 : nullptr);
}

NpuWeights::NpuWeights(const std::vector<Driver*>& drivers, const QuantizedMatrix& m)
    : k_(m.k),
      k_padded_(m.k_padded),
      n_(m.n),
      scale_groups_(m.scale_groups()),
      scheme_(m.scheme),
      segments_(m.groups),
      scales_(m.scales) {
  if (drivers.empty()) fail("rocket: no NPU driver to hold weights");
  const unsigned planes = m.planes();
  if (planes < 1 || planes > 2 || m.q.size() != size_t(n_) * k_padded_ * planes ||
      scales_.size() != size_t(n_) * scale_groups_)
    fail("rocket: quantized weight has {} values / {} scales for {} x {} x {} planes", m.q.size(), scales_.size(), n_,
         k_padded_, planes);
  const unsigned n = n_;
  const int8_t* q = m.q.data();
  const unsigned q_cols = k_padded_;
  const auto ranges = split_n(n, unsigned(drivers.size()));
  std::vector<Slice> plan;
  for (size_t c = 0; c < ranges.size(); ++c) {
    unsigned slot = 0;
    for (unsigned n0 = 0; n0 < ranges[c].second; n0 += kMaxSliceN) {
      Slice s;
      s.driver = drivers[c];
      s.slot = slot++;
      s.n0 = ranges[c].first + n0;
      s.n = std::min(kMaxSliceN, ranges[c].second - n0);
      plan.push_back(s);
    }
  }
  try {
    for (Slice s : plan) {
      std::vector<std::vector<uint8_t>> packed;
      uint64_t total = 0;
      for (const KSegment& seg : segments_)
        for (unsigned p = 0; p < planes; ++p) {
          // Host layout the packer takes: uint8 [n][k] with zero point 0x80.
          const int8_t* plane = q + size_t(p) * n * q_cols;
          std::vector<uint8_t> host(size_t(s.n) * seg.k, 0x80);
          for (unsigned r = 0; r < s.n; ++r) {
            const int8_t* row = plane + size_t(s.n0 + r) * q_cols;
            for (unsigned i = 0; i < seg.k && seg.k0 + i < q_cols; ++i)
              host[size_t(r) * seg.k + i] = uint8_t(int(row[seg.k0 + i]) + 0x80);
          }
          packed.push_back(pack_weights(gemm_op(4, seg.k, s.n), host));
          s.seg_offset.push_back(uint32_t(total));
          total = align64(total + packed.back().size());
        }
      s.bo = s.driver->create_bo(total);
      slices_.push_back(s);  // owned from here (destroyed on failure below)
      uint8_t* dst = s.driver->cpu_pointer(s.bo.handle);
      for (size_t i = 0; i < packed.size(); ++i) std::memcpy(dst + s.seg_offset[i], packed[i].data(), packed[i].size());
      s.driver->fini_bo(s.bo.handle);
    }
  } catch (...) {
    for (const Slice& s : slices_) s.driver->destroy_bo(s.bo.handle);
    throw;
  }
}

NpuWeights::~NpuWeights() {
  for (const Slice& s : slices_) {
    try {
      s.driver->destroy_bo(s.bo.handle);
    } catch (...) {
    }
  }
}

uint64_t NpuWeights::npu_bytes() const {
  uint64_t b = 0;
  for (const Slice& s : slices_) b += s.bo.size;
  return b;
}

ScratchBo::ScratchBo(Driver& d, uint64_t size) : driver_(d), info_(d.create_bo(std::max<uint64_t>(size, 64))) {
  cpu_ = d.cpu_pointer(info_.handle);
  d.fini_bo(info_.handle);
}

ScratchBo::~ScratchBo() {
  try {
    driver_.destroy_bo(info_.handle);
  } catch (...) {
  }
}

std::shared_ptr<ScratchBo> ScratchPool::get(Driver& d, bool output, unsigned slot, uint64_t size) {
  for (Entry& e : entries_)
    if (e.driver == &d && e.output == output && e.slot == slot) {
      if (e.bo->info().size < size) e.bo = std::make_shared<ScratchBo>(d, size);
      return e.bo;
    }
  entries_.push_back({&d, output, slot, std::make_shared<ScratchBo>(d, size)});
  return entries_.back().bo;
}

NpuGemm::NpuGemm(const NpuWeights& w, unsigned m, ScratchPool& scratch, double timeout_s)
    : w_(w), m_(m), m_padded_(align_up(std::max(m, 1u), 4)), timeout_s_(timeout_s) {
  if (m == 0 || m_padded_ > kMaxGemmRows) fail("rocket: GEMM with {} rows (1..{})", m, kMaxGemmRows);
  const unsigned kp = w.k_padded(), x_planes = w.scheme().input_planes;
  terms_ = plane_terms(x_planes, w.planes());
  xq_.assign(size_t(x_planes) * m_padded_ * kp, 0);
  xrow_.assign(kp, 0.0f);
  xscale_.assign(size_t(m) * w.scale_groups(), 0.0f);
  packed_.assign(size_t(x_planes) * (kp / 16) * m_padded_ * 16, 0);  // plane p at channel groups [p K'/16, ...)
  unsigned max_n = 0;
  for (const auto& s : w.slices()) max_n = std::max(max_n, s.n);
  acc_.assign(size_t(m) * max_n, 0);

  for (size_t si = 0; si < w.slices().size(); ++si) {
    const NpuWeights::Slice& s = w.slices()[si];
    SliceRun core;
    core.driver = s.driver;
    // Compile every segment: tiling + streams; then place them in one regcmd BO.
    std::vector<std::vector<std::vector<uint64_t>>> streams;
    std::vector<ConvOp> ops;
    uint64_t out_total = 0, regcmd_total = 0;
    for (size_t g = 0; g < w.segments().size(); ++g)
      for (const PlaneTerm& term : terms_) {
        ops.push_back(gemm_op(m_padded_, w.segments()[g].k, s.n));
        plans_.push_back(plan_tiles(ops.back(), Policy::Opal));
        Unit u;
        u.slice = si;
        u.segment = g;
        u.term = term;
        u.out_offset = out_total;
        u.out_bytes = output_bytes(s.n, m_padded_);
        out_total = align64(out_total + u.out_bytes);
        core.units.push_back(std::move(u));
      }
    core.input = scratch.get(*s.driver, false, 0, packed_.size());
    core.output = scratch.get(*s.driver, true, s.slot, out_total);
    try {
      core.bias = s.driver->create_bo(uint64_t(align_up(s.n, 32)) * 4);  // zero biases (symmetric int8)
      const size_t plan0 = plans_.size() - core.units.size();
      std::vector<RegcmdBuffer> bufs;
      std::vector<uint64_t> reg_offsets;
      // Two passes: sizes first (addresses do not change stream lengths), then the real IOVAs.
      for (size_t g = 0; g < core.units.size(); ++g) {
        const TaskStreamParams p{&ops[g], &plans_[plan0 + g], {}, {0, 1, 0}, 0};
        std::vector<std::vector<uint64_t>> st;
        for (size_t t = 0; t < plans_[plan0 + g].tasks.size(); ++t) st.push_back(build_task_stream(p, t));
        reg_offsets.push_back(regcmd_total);
        regcmd_total = align64(regcmd_total + regcmd_buffer_size(st));
      }
      core.regcmd = s.driver->create_bo(regcmd_total);
      uint8_t* reg_cpu = s.driver->cpu_pointer(core.regcmd.handle);
      for (size_t g = 0; g < core.units.size(); ++g) {
        Unit& u = core.units[g];
        const KSegment& seg = w.segments()[u.segment];
        BufferAddresses a;
        const uint64_t channel = uint64_t(u.term.x) * kp + seg.k0;  // of the plane-stacked input
        a.input = core.input->info().iova + uint32_t(channel / 16 * m_padded_ * 16);
        a.output = core.output->info().iova + uint32_t(u.out_offset);
        a.weights = s.bo.iova + s.seg_offset[u.segment * w.planes() + u.term.w];
        a.biases = core.bias.iova;
        const TaskStreamParams p{&ops[g], &plans_[plan0 + g], a, {0, 1, 0}, 0};
        std::vector<std::vector<uint64_t>> st;
        for (size_t t = 0; t < plans_[plan0 + g].tasks.size(); ++t) st.push_back(build_task_stream(p, t));
        const uint32_t iova = core.regcmd.iova + uint32_t(reg_offsets[g]);
        const RegcmdBuffer rb = assemble_regcmd(std::move(st), iova);
        std::memcpy(reg_cpu + reg_offsets[g], rb.bytes.data(), rb.bytes.size());
        u.jobs = make_jobs(plans_[plan0 + g], rb, iova, core.input->info().handle, core.output->info().handle);
      }
      s.driver->fini_bo(core.regcmd.handle);
      s.driver->cpu_pointer(core.bias.handle);
      s.driver->fini_bo(core.bias.handle);
    } catch (...) {
      if (core.regcmd.size) s.driver->destroy_bo(core.regcmd.handle);
      if (core.bias.size) s.driver->destroy_bo(core.bias.handle);
      for (SliceRun& c : runs_) {
        c.driver->destroy_bo(c.regcmd.handle);
        c.driver->destroy_bo(c.bias.handle);
      }
      throw;
    }
    for (const Unit& u : core.units) core.jobs.insert(core.jobs.end(), u.jobs.begin(), u.jobs.end());
    runs_.push_back(std::move(core));
  }
}

NpuGemm::~NpuGemm() {
  for (SliceRun& c : runs_) {
    try {
      c.driver->destroy_bo(c.regcmd.handle);
      c.driver->destroy_bo(c.bias.handle);
    } catch (...) {
    }
  }
}

void NpuGemm::run(const float* x, int64_t x_stride, float* y, int64_t y_stride, bool timed) {
  const unsigned K = w_.k(), kp = w_.k_padded(), M = m_, Mp = m_padded_;
  info_ = {};
  info_.timed = timed;
  size_t phase = 0;
  auto mark = [&] {
    if (timed) info_.t_ns[phase++] = phase_clock_ns();
  };
  mark();
  // 1. Quantize the activations per row and pack them NC1HWC2.
  const unsigned G = w_.scale_groups(), x_planes = w_.scheme().input_planes;
  const size_t plane = size_t(Mp) * kp;
  for (unsigned r = 0; r < M; ++r)
    quantize_operand_row(x + int64_t(r) * x_stride, K, w_.scheme(), w_.segments(), xrow_.data(), &xq_[size_t(r) * kp],
                         &xscale_[size_t(r) * G], x_planes, plane);
  for (unsigned g = 0; g < x_planes * kp / 16; ++g)
    for (unsigned r = 0; r < Mp; ++r)
      std::memcpy(&packed_[(size_t(g) * Mp + r) * 16], &xq_[(g * 16 / kp) * plane + size_t(r) * kp + g * 16 % kp], 16);
  mark();
  // 2. Hand inputs and sentinels to each core, submit everything, then wait.
  for (SliceRun& c : runs_) {
    std::memcpy(c.input->cpu(), packed_.data(), packed_.size());
    c.driver->fini_bo(c.input->info().handle);
    for (const Unit& u : c.units) {
      const unsigned n = w_.slices()[u.slice].n;
      uint8_t* out = c.output->cpu() + u.out_offset;
      std::memcpy(out, &kSentinel, 4);
      std::memcpy(out + output_index(M - 1, n - 1, Mp), &kSentinel, 4);
    }
    c.driver->fini_bo(c.output->info().handle);
  }
  for (SliceRun& c : runs_) {
    c.driver->submit(c.jobs);
    info_.submits++;
    info_.jobs += unsigned(c.jobs.size());
    for (const auto& j : c.jobs) info_.tasks += unsigned(j.tasks.size());
  }
  mark();
  const int64_t deadline = deadline_after(timeout_s_);
  for (SliceRun& c : runs_) c.driver->prep_bo(c.output->info().handle, deadline);
  mark();
  // 3. Check the sentinels, sum the K segments, dequantize.
  for (SliceRun& c : runs_) {
    const NpuWeights::Slice& s = w_.slices()[c.units.front().slice];
    std::fill(acc_.begin(), acc_.begin() + size_t(M) * s.n, 0.0f);
    for (const Unit& u : c.units) {
      const uint8_t* out = c.output->cpu() + u.out_offset;
      int32_t first, last;
      std::memcpy(&first, out, 4);
      std::memcpy(&last, out + output_index(M - 1, s.n - 1, Mp), 4);
      if (first == kSentinel || last == kSentinel)
        fail(
            "rocket: {} did not write the output of a {}x{}x{} GEMM (K segment {}): the job was rejected or "
            "the NPU hung (SUBMIT does not report per-job errors)",
            c.driver->name(), M, K, s.n, u.segment);
      // One scale group per segment, or a single group shared by every segment.
      const unsigned g_scale = G == 1 ? 0 : unsigned(u.segment);
      const float* sw = w_.scales().data() + size_t(s.n0) * G + g_scale;
      const float term_scale = 1.0f / float(std::pow(kLoPlaneScale, float(u.term.x + u.term.w)));
      for (unsigned g = 0; g < div_up(s.n, 4); ++g)
        for (unsigned r = 0; r < M; ++r) {
          const uint8_t* atom = out + (size_t(g) * Mp + r) * 16;
          const float sx = xscale_[size_t(r) * G + g_scale] * term_scale;
          float* ar = &acc_[size_t(r) * s.n + g * 4];
          for (unsigned ch = 0; ch < 4 && g * 4 + ch < s.n; ++ch) {
            int32_t v;
            std::memcpy(&v, atom + ch * 4, 4);
            ar[ch] += float(v) * sx * sw[size_t(g * 4 + ch) * G];
          }
        }
    }
    for (unsigned r = 0; r < M; ++r)
      std::memcpy(y + int64_t(r) * y_stride + s.n0, &acc_[size_t(r) * s.n], size_t(s.n) * sizeof(float));
  }
  mark();
}

}  // namespace opal::rocket
