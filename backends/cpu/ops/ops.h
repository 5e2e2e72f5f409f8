// The CPU backend's op implementations, one file per op family under
// backends/cpu/ops/. Each op gets the node, the thread pool and the scratch
// bytes its plan reserved (work_size); ops never allocate.
#pragma once
#include <cstdint>

#include "graph/backend.h"
#include "graph/thread_pool.h"

namespace opal::cpu {

// Per graph run: how many of a KV cache's cells can be in use (one past the last one that is), found by the first
// ATTENTION node of the run that reads the cache and reused by the others. A cache's cell metadata does not change
// while a graph runs (the runtime commits a ubatch's cells before running it), and scanning it per layer cost
// O(n_ctx) each time: at -c 131072, 1 MB of metadata read again by every layer of every token.
struct LiveCellsMemo {
  static constexpr int kEntries = 2;  // a model's full and sliding-window caches
  const void* cells[kEntries] = {};
  int64_t n_cells[kEntries] = {};
  int64_t n_live[kEntries] = {};
};

struct OpContext {
  ThreadPool& pool;
  uint8_t* work = nullptr;              // work_size(node, threads) bytes, 64-byte aligned
  LiveCellsMemo* live_cells = nullptr;  // the run's memo (CpuExecutor::run); none: every call scans
};

// One past the last cell in use of a KV cache's [2, n_cells] (pos, seq) metadata (seq < 0: free), through
// ctx.live_cells where the run has one.
int64_t live_cell_count(const Tensor& cells, const OpContext& ctx);

// Runs fn(ith, nth) over the pool's chunks, or as fn(0, 1) on the calling
// thread when the node has fewer than kSerialElements output elements: waking
// the workers and waiting for their chunks costs more than such a node's work
// (a decode token's elementwise nodes: 0.5-1 us of work, 10-20 us a node at 2
// threads on a busy host). Row splits never change a row's arithmetic, so the
// results are the same bits either way.
constexpr int64_t kSerialElements = 16384;
template <class Fn>
void run_rows(const OpContext& ctx, int64_t n_elements, const Fn& fn) {
  if (n_elements < kSerialElements) return fn(0, 1);
  ctx.pool.run(fn);
}

// Whether the CPU can run this node, and why not.
Support supports(const Tensor& node);
// Scratch bytes the node needs (0 for most ops).
uint64_t work_size(const Tensor& node, int n_threads);
// Runs one node. Its sources and output have host-visible data.
void compute(const Tensor& node, const OpContext& ctx);
// Name of the kernel compute() uses for a node (for perf events).
const char* kernel_name(const Tensor& node);

// Per family (ops/<family>.cpp).
void compute_get_rows(const Tensor& node, const OpContext& ctx);
void compute_elementwise(const Tensor& node,
                         const OpContext& ctx);  // Mul Add Div Scale Silu Swiglu Cpy Gelu Geglu
// llama.cpp's GELU (tanh form through its f16 table), the definition GELU / GEGLU kernels are tested against.
float gelu_ref(float x);
// gelu_ref(g) * u, 0 where g <= -10 (llama.cpp's GEGLU); and the f16 table both read (65536 floats).
float geglu_ref(float g, float u);
const float* gelu_table();
void compute_norm(const Tensor& node, const OpContext& ctx);  // RmsNorm Softmax SumRows
void compute_mul_mat(const Tensor& node, const OpContext& ctx);
void compute_mul_mat_id(const Tensor& node, const OpContext& ctx);
uint64_t mul_mat_work_size(const Tensor& node, int n_threads);
// How many chunks MUL_MAT cuts a weight of n_rows rows (weight_bytes in all)
// into for n_act activation rows on n_threads threads (pool_size: the pool's
// size()): 1 on one thread; size() for batches; for decode-sized batches about
// 1 MiB of weights a chunk, between size() and 32 a thread (ops/matmul.cpp).
int mul_mat_chunks(uint64_t weight_bytes, int64_t n_rows, int n_act, int n_threads, int pool_size);
// Rows [r0, r1) of chunk `chunk` of n_chunks (decode-sized batches): whole
// 16-row units, the units spread evenly.
void mul_mat_chunk_rows(int64_t n_rows, int chunk, int n_chunks, int64_t* r0, int64_t* r1);
// A group of MUL_MATs run as one parallel job (one barrier instead of one a
// node; the CPU executor forms them: docs/architecture.md, the executor):
// decode-sized MUL_MATs of single matrices that read the same activations
// (a layer's q, k and v; gate and up), at most kMaxMulMatGroup. Each node's
// rows are cut as compute_mul_mat cuts them and its results are the same bits.
constexpr int kMaxMulMatGroup = 4;
bool mul_mat_groupable(const Tensor& first, const Tensor& node);
uint64_t mul_mat_group_work_size(const Tensor* const* nodes, int count, int n_threads);
// A decode-sized MUL_MAT of one matrix (what the executor's idle workers
// prefetch the weights of, ahead of its job).
bool mul_mat_prefetchable(const Tensor& node);
void compute_mul_mat_group(const Tensor* const* nodes, int count, const OpContext& ctx);
void compute_rope(const Tensor& node, const OpContext& ctx);
void compute_attention(const Tensor& node, const OpContext& ctx);
uint64_t attention_work_size(const Tensor& node, int n_threads);
// The tiled form (ops/attention_flash.cpp), which compute_attention runs for a node with iparams[2] = 1.
void compute_attention_flash(const Tensor& node, const OpContext& ctx);
uint64_t attention_flash_work_size(const Tensor& node, int n_threads);
void compute_kv_store(const Tensor& node, const OpContext& ctx);
void compute_top_k(const Tensor& node, const OpContext& ctx);
// RWKV-7 (ops/rwkv.cpp).
void compute_rwkv_rows(const Tensor& node, const OpContext& ctx);  // Norm L2Norm Unary
void compute_token_shift(const Tensor& node, const OpContext& ctx);
void compute_lerp(const Tensor& node, const OpContext& ctx);
void compute_wkv7_inputs(const Tensor& node, const OpContext& ctx);
void compute_wkv7_output(const Tensor& node, const OpContext& ctx);
void compute_wkv7_value_mix(const Tensor& node, const OpContext& ctx);
void compute_wkv7(const Tensor& node, const OpContext& ctx);

}  // namespace opal::cpu
