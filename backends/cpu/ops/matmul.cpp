// MUL_MAT and MUL_MAT_ID on the CPU, through the per-dtype kernel table
// (kernels/matmul_kernels.h). Two phases per node:
//   1. convert every activation row to the kernel's packed format (the
//      vec_dot type), rows split across threads, into the plan's scratch;
//   2. the kernel's gemm over a slice of weight rows per thread.
// Scratch layout: [converted activations][per-thread kernel scratch].
// Threads: batches split the weight rows into the pool's size() chunks;
// decode-sized batches (<= 8 rows) on several threads into ~1 MiB chunks of
// 16-row units (mul_mat_chunks), claimed dynamically, per-thread scratch by
// slot. A group (compute_mul_mat_group: the executor's q/k/v, gate/up) lays
// out [each member's activations][per-thread scratch] and runs every
// member's chunks as one job. A row's arithmetic never depends on its chunk.
//
// A weight repacked at load (Tensor::layout, kernels/repack.h) is split
// across threads on whole row groups. Batches the entry's gemm_packed takes
// (packed_reads: decode, small batches, and mid-size ones where its order is
// the batch path's) read the layout, and so do the prompt batches its
// gemm_packed_batch takes (AVX2 Q8_0 in llama.cpp's order, Q4_0, and Q4_K /
// Q6_K on every x86 ISA); any other (the Q8_0 lanes order, an entry of
// another ISA or the reference) get the rows unpacked kUnpackRows at a time
// into the thread's scratch (after the kernel's) and the plain gemm on them:
// the same bytes per row, so the same results as on the GGUF's layout.
//
// MUL_MAT_ID (mixture of experts) groups the (token, slot) rows by expert so
// that each expert's weights are streamed once per ubatch, not once per row:
//   1. convert the activation rows; 2. count rows per expert and lay them out
//   expert by expert (a counting sort); 3. gather each expert's activation
//   rows contiguously; 4. per thread (a slice of output columns): one gemm per
//   used expert into a [rows x N] staging matrix, then scatter the rows to
//   their (slot, token) places. Extra scratch after the per-thread part:
//   [gathered activations][staging outputs][row order][expert offsets].
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/matmul_kernels.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/ops/ops.h"
#include "backends/cpu/ops/row_iter.h"
#include "core/error.h"

namespace opal::cpu {
namespace {

uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

constexpr int64_t kUnpackRows = 32;  // a multiple of every layout's group rows and of the kernels' 16-row slices

// Whether the entry reads the weight's layout itself for n_act activation rows.
bool reads_packed(const MatmulKernels& k, const Tensor& w, int64_t n_act) {
  return w.layout != kLayoutPlain && k.packed_layout == w.layout && packed_reads(k, n_act);
}

struct Layout {
  uint64_t act_bytes = 0;     // all converted activation rows
  uint64_t scratch_each = 0;  // per thread
  // MUL_MAT_ID only:
  uint64_t gather_bytes = 0, staging_bytes = 0, order_bytes = 0, offsets_bytes = 0;
};

Layout layout(const Tensor& node, int n_threads) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const MatmulKernels* k = matmul_kernels(w.type);
  Layout l;
  if (!k) return l;
  l.act_bytes = align64(k->act_row_bytes(w.ne[0]) * uint64_t(x.n_rows()));
  l.scratch_each = align64(uint64_t(k->scratch_floats(w.ne[0])) * sizeof(float));
  if (w.layout != kLayoutPlain) l.scratch_each += align64(uint64_t(kUnpackRows) * w.nb[1]);
  if (node.op == Op::MulMatId) {
    const Tensor& ids = *node.src[2];
    const uint64_t pairs = uint64_t(ids.ne[0] * ids.ne[1]);
    l.gather_bytes = align64(k->act_row_bytes(w.ne[0]) * pairs);
    l.staging_bytes = align64(pairs * uint64_t(w.ne[1]) * sizeof(float));
    l.order_bytes = align64(pairs * sizeof(int32_t));
    l.offsets_bytes = align64(uint64_t(w.ne[2] + 1) * sizeof(int64_t));
  }
  return l;
}

void convert_all(const MatmulKernels& k, const Tensor& x, uint8_t* act, uint64_t act_row, const OpContext& ctx) {
  // A few rows (decode) are converted on the calling thread: waking the pool
  // would cost more than the conversion.
  if (x.n_rows() * x.ne[0] <= 16384 || ctx.pool.n_threads() == 1) {
    for (int64_t r = 0; r < x.n_rows(); ++r)
      k.convert_act(k.act_type, reinterpret_cast<const float*>(row_ptr_flat(x, r)), act + uint64_t(r) * act_row,
                    x.ne[0]);
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_range(x.n_rows(), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      k.convert_act(k.act_type, reinterpret_cast<const float*>(row_ptr_flat(x, r)), act + uint64_t(r) * act_row,
                    x.ne[0]);
  });
}

// The gemm of one weight matrix on a thread's slice of rows, whatever its layout.
void gemm_any(const MatmulKernels& k, const Tensor& w, GemmArgs a, uint64_t kernel_scratch_bytes) {
  if (w.layout == kLayoutPlain) return k.gemm(a);
  a.layout = w.layout;
  a.n_rows = w.ne[1];
  if (reads_packed(k, w, a.n_act)) return k.gemm_packed(a);
  if (k.packed_layout == w.layout && k.gemm_packed_batch && k.gemm_packed_batch(a)) return;
  uint8_t* rows = reinterpret_cast<uint8_t*>(a.scratch) + kernel_scratch_bytes;
  const int64_t begin = a.row_begin, end = a.row_end;
  float* out = a.out;
  for (int64_t r = begin; r < end; r += kUnpackRows) {
    const int64_t n = std::min(kUnpackRows, end - r);
    unpack_rows(w.layout, w.type, a.w, w.ne[0], w.ne[1], r, r + n, rows);
    GemmArgs s = a;
    s.w = rows;
    s.row_begin = 0;
    s.row_end = n;
    s.out = out + r;
    s.layout = kLayoutPlain;
    s.n_rows = n;
    k.gemm(s);
  }
}

// Rows per unit of a prompt batch's split: the batch kernels work in slices
// of 16 (AVX2) or 32 (AVX-512) weight rows and compute a partial slice in
// full, so a chunk of 72 rows (SmolLM2's 576 over 8 chunks) cost 80 and one
// of 24 (its 192-row K / V) cost 32. 32 is a multiple of every layout's group.
constexpr int64_t kBatchSplitRows = 32;
constexpr int64_t kBatchSplitMinAct = 9;  // batches the kernels run in slices (Q4_0: over 8 rows)

// Thread ith's rows of N: whole groups of the layout (the rest after the last
// group with the last thread's); for prompt batches whole 32-row units.
void split_rows(const Tensor& w, int64_t n_act, int ith, int nth, int64_t* n0, int64_t* n1) {
  const int64_t N = w.ne[1];
  const int64_t G = n_act >= kBatchSplitMinAct && nth > 1 ? kBatchSplitRows : layout_group_rows(w.layout);
  if (G == 1) return split_range(N, ith, nth, n0, n1);
  int64_t g0, g1;
  split_range((N + G - 1) / G, ith, nth, &g0, &g1);
  *n0 = std::min(N, g0 * G);
  *n1 = std::min(N, g1 * G);
}

// Decode-sized matmuls (at most kFineMaxAct activation rows) on several
// threads are cut by weight bytes rather than into the pool's size() chunks:
// about kChunkBytes of weights a chunk, at least size() and at most
// kMaxChunksPerThread a thread, in whole units of kFineUnitRows rows (the
// kernels' 16-row slices, two row groups). A decode's output matrix (Qwen3-0.6B
// Q8_0: 166 MB) in size() = 8 chunks at 2 threads left one thread idle for up
// to a 20 MB chunk (~0.7 ms) whenever the two ran at different speeds; in
// ~1 MiB chunks the threads finish within ~30 us of each other. Each row's
// arithmetic is the same in any chunk, so the results are the same bits.
constexpr int64_t kFineMaxAct = 8;
constexpr uint64_t kChunkBytes = uint64_t(1) << 20;
constexpr int kMaxChunksPerThread = 32;
constexpr int64_t kFineUnitRows = 16;

}  // namespace

int mul_mat_chunks(uint64_t weight_bytes, int64_t n_rows, int n_act, int n_threads, int pool_size) {
  if (n_threads <= 1) return 1;
  if (n_act > kFineMaxAct) return pool_size;
  const int64_t units = (n_rows + kFineUnitRows - 1) / kFineUnitRows;
  int64_t n = int64_t(weight_bytes / kChunkBytes);
  n = std::clamp<int64_t>(n, pool_size, int64_t(kMaxChunksPerThread) * n_threads);
  return int(std::max<int64_t>(1, std::min(n, units)));
}

void mul_mat_chunk_rows(int64_t n_rows, int chunk, int n_chunks, int64_t* r0, int64_t* r1) {
  const int64_t units = (n_rows + kFineUnitRows - 1) / kFineUnitRows;
  int64_t u0, u1;
  split_even(units, chunk, n_chunks, &u0, &u1);
  *r0 = std::min(n_rows, u0 * kFineUnitRows);
  *r1 = std::min(n_rows, u1 * kFineUnitRows);
}

uint64_t mul_mat_work_size(const Tensor& node, int n_threads) {
  Layout l = layout(node, n_threads);
  return l.act_bytes + l.scratch_each * uint64_t(n_threads) + l.gather_bytes + l.staging_bytes + l.order_bytes +
         l.offsets_bytes;
}

namespace {

// Rows [n0, n1) of every matrix of a MUL_MAT node, its activation rows
// converted at `act`, the kernel's scratch at `scratch`.
void gemm_rows(const Tensor& node, const MatmulKernels& k, const uint8_t* act, uint8_t* scratch, int64_t n0,
               int64_t n1) {
  if (n0 >= n1) return;
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t T = x.ne[1];
  const int64_t r2 = x.ne[2] / w.ne[2], r3 = x.ne[3] / w.ne[3];
  const uint64_t act_row = k.act_row_bytes(w.ne[0]);
  const uint64_t kernel_scratch = uint64_t(k.scratch_floats(w.ne[0])) * sizeof(float);
  for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < x.ne[2]; ++i2) {
      GemmArgs a;
      a.w = static_cast<const uint8_t*>(w.data) + (i2 / r2) * w.nb[2] + (i3 / r3) * w.nb[3];
      a.w_row_bytes = w.nb[1];
      a.k = w.ne[0];
      a.row_begin = n0;
      a.row_end = n1;
      a.act = act + uint64_t((i2 + i3 * x.ne[2]) * T) * act_row;
      a.act_row_bytes = act_row;
      a.n_act = T;
      a.out = reinterpret_cast<float*>(row_ptr(node, 0, i2, i3));
      a.out_stride = int64_t(node.nb[1] / sizeof(float));
      a.scratch = reinterpret_cast<float*>(scratch);
      gemm_any(k, w, a, kernel_scratch);
    }
}

void check_layout_shape(const Tensor& node) {
  const Tensor& w = *node.src[0];
  if (w.layout != kLayoutPlain && (w.ne[2] != 1 || w.ne[3] != 1 || !w.is_contiguous()))
    fail("MUL_MAT '{}': weight '{}' in layout {} must be one contiguous matrix, found {}", node.name, w.name,
         layout_name(w.layout), w.shape_string());
}

int64_t n_act_of(const Tensor& node) {
  const Tensor& x = *node.src[1];
  return x.ne[1] * x.ne[2] * x.ne[3];
}

int chunks_of(const Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const uint64_t bytes = uint64_t(w.ne[1]) * w.nb[1] * uint64_t(w.ne[2] * w.ne[3]);
  return mul_mat_chunks(bytes, w.ne[1], int(std::min<int64_t>(n_act_of(node), 1 << 20)), ctx.pool.n_threads(),
                        ctx.pool.size());
}

}  // namespace

void compute_mul_mat(const Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const MatmulKernels& k = *matmul_kernels(w.type);
  const Layout l = layout(node, ctx.pool.size());
  uint8_t* act = ctx.work;
  convert_all(k, x, act, k.act_row_bytes(w.ne[0]), ctx);
  check_layout_shape(node);
  auto scratch = [&](int slot) { return ctx.work + l.act_bytes + l.scratch_each * uint64_t(slot); };
  if (ctx.pool.n_threads() > 1 && n_act_of(node) <= kFineMaxAct) {
    ctx.pool.run_chunks(chunks_of(node, ctx), [&](int chunk, int n, int slot) {
      int64_t n0, n1;
      mul_mat_chunk_rows(w.ne[1], chunk, n, &n0, &n1);
      gemm_rows(node, k, act, scratch(slot), n0, n1);
    });
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    int64_t n0, n1;
    split_rows(w, x.ne[1], ith, nth, &n0, &n1);
    gemm_rows(node, k, act, scratch(ith), n0, n1);
  });
}

bool mul_mat_groupable(const Tensor& first, const Tensor& node) {
  auto simple = [](const Tensor& n) {
    if (n.op != Op::MulMat || !n.src[0] || !n.src[1]) return false;  // other ops may have no sources
    const Tensor& w = *n.src[0];
    const Tensor& x = *n.src[1];
    return matmul_kernels(w.type) && w.ne[2] == 1 && w.ne[3] == 1 && x.ne[2] == 1 && x.ne[3] == 1 &&
           n_act_of(n) <= kFineMaxAct;
  };
  return simple(first) && simple(node) && node.src[1] == first.src[1];
}

bool mul_mat_prefetchable(const Tensor& node) { return mul_mat_groupable(node, node); }

uint64_t mul_mat_group_work_size(const Tensor* const* nodes, int count, int n_threads) {
  uint64_t acts = 0, each = 0;
  for (int i = 0; i < count; ++i) {
    const Layout l = layout(*nodes[i], n_threads);
    acts += l.act_bytes;
    each = std::max(each, l.scratch_each);
  }
  return acts + each * uint64_t(n_threads);
}

void compute_mul_mat_group(const Tensor* const* nodes, int count, const OpContext& ctx) {
  if (count > kMaxMulMatGroup) fail("MUL_MAT group of {} nodes, at most {}", count, kMaxMulMatGroup);
  struct Part {
    const Tensor* node;
    const MatmulKernels* k;
    const uint8_t* act;
    int c0, c1;  // its chunks in the group's
  };
  Part parts[kMaxMulMatGroup];
  uint64_t off = 0, each = 0;
  int n_chunks = 0;
  for (int i = 0; i < count; ++i) {
    const Tensor& node = *nodes[i];
    const Tensor& w = *node.src[0];
    check_layout_shape(node);
    const MatmulKernels& k = *matmul_kernels(w.type);
    const Layout l = layout(node, ctx.pool.size());
    Part& p = parts[i];
    p.node = &node;
    p.k = &k;
    // The same activation rows in the same format as an earlier part's: converted once.
    p.act = nullptr;
    for (int j = 0; j < i && !p.act; ++j)
      if (parts[j].k->act_type == k.act_type && parts[j].k->convert_act == k.convert_act &&
          parts[j].node->src[0]->ne[0] == w.ne[0])
        p.act = parts[j].act;
    if (!p.act) {
      uint8_t* act = ctx.work + off;
      convert_all(k, *node.src[1], act, k.act_row_bytes(w.ne[0]), ctx);
      p.act = act;
    }
    off += l.act_bytes;
    each = std::max(each, l.scratch_each);
    p.c0 = n_chunks;
    n_chunks += chunks_of(node, ctx);
    p.c1 = n_chunks;
  }
  ctx.pool.run_chunks(n_chunks, [&](int chunk, int, int slot) {
    int i = 0;
    while (chunk >= parts[i].c1) ++i;
    const Part& p = parts[i];
    int64_t n0, n1;
    mul_mat_chunk_rows(p.node->src[0]->ne[1], chunk - p.c0, p.c1 - p.c0, &n0, &n1);
    gemm_rows(*p.node, *p.k, p.act, ctx.work + off + each * uint64_t(slot), n0, n1);
  });
}

void compute_mul_mat_id(const Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const MatmulKernels& k = *matmul_kernels(w.type);
  if (w.layout != kLayoutPlain)
    fail("MUL_MAT_ID '{}': expert weights '{}' in layout {} (repacking refuses expert weights)", node.name, w.name,
         layout_name(w.layout));
  const int nth_all = ctx.pool.size();
  const Layout l = layout(node, nth_all);
  const uint64_t act_row = k.act_row_bytes(w.ne[0]);
  uint8_t* act = ctx.work;
  convert_all(k, x, act, act_row, ctx);

  const int64_t N = w.ne[1], n_used = ids.ne[0], T = ids.ne[1], S = x.ne[1], E = w.ne[2];
  const int64_t pairs = n_used * T;
  uint8_t* extra = ctx.work + l.act_bytes + l.scratch_each * uint64_t(nth_all);
  uint8_t* gathered = extra;
  float* staging = reinterpret_cast<float*>(extra + l.gather_bytes);
  int32_t* order = reinterpret_cast<int32_t*>(extra + l.gather_bytes + l.staging_bytes);
  int64_t* offsets = reinterpret_cast<int64_t*>(extra + l.gather_bytes + l.staging_bytes + l.order_bytes);
  auto expert_of = [&](int64_t p) {  // p = t * n_used + j
    return *reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(ids.data) + (p % n_used) * ids.nb[0] +
                                             (p / n_used) * ids.nb[1]);
  };

  // Counting sort of the rows by expert; ids out of range (impossible with
  // TOP_K ids) go to a bucket of their own at the end and produce zeros.
  for (int64_t e = 0; e <= E; ++e) offsets[e] = 0;
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = expert_of(p);
    ++offsets[(e < 0 || e >= E) ? E : e];
  }
  int64_t run = 0;
  for (int64_t e = 0; e <= E; ++e) {
    const int64_t c = offsets[e];
    offsets[e] = run;
    run += c;
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = expert_of(p);
    order[offsets[(e < 0 || e >= E) ? E : e]++] = int32_t(p);
  }
  for (int64_t e = E; e > 0; --e) offsets[e] = offsets[e - 1];  // back to start offsets
  offsets[0] = 0;

  ctx.pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_range(pairs, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = order[r], t = p / n_used, j = p % n_used;
      std::memcpy(gathered + uint64_t(r) * act_row, act + uint64_t((j % S) + t * S) * act_row, act_row);
    }
  });

  ctx.pool.run([&](int ith, int nth) {
    int64_t n0, n1;
    split_range(N, ith, nth, &n0, &n1);
    if (n0 >= n1) return;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = offsets[e], count = (e + 1 < E ? offsets[e + 1] : offsets[E]) - begin;
      if (count == 0) continue;
      GemmArgs a;
      a.w = static_cast<const uint8_t*>(w.data) + uint64_t(e) * w.nb[2];
      a.w_row_bytes = w.nb[1];
      a.k = w.ne[0];
      a.row_begin = n0;
      a.row_end = n1;
      a.act = gathered + uint64_t(begin) * act_row;
      a.act_row_bytes = act_row;
      a.n_act = count;
      a.out = staging + uint64_t(begin) * uint64_t(N);
      a.out_stride = N;
      a.single_rows = true;  // llama.cpp never takes its batched (tinyBLAS) order for expert rows
      a.scratch = reinterpret_cast<float*>(ctx.work + l.act_bytes + l.scratch_each * uint64_t(ith));
      k.gemm(a);
    }
    for (int64_t r = 0; r < pairs; ++r) {
      const int64_t p = order[r], t = p / n_used, j = p % n_used;
      float* out = reinterpret_cast<float*>(row_ptr(node, j, t, 0));
      if (r >= offsets[E]) {
        for (int64_t n = n0; n < n1; ++n) out[n] = 0.0f;
      } else {
        std::memcpy(out + n0, staging + uint64_t(r) * uint64_t(N) + uint64_t(n0), uint64_t(n1 - n0) * sizeof(float));
      }
    }
  });
}

}  // namespace opal::cpu
