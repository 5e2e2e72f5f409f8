// Compute memory planned once: a context reserves its compute buffers from the
// worst-case graphs of its batch on the first decode, and every later batch
// shape reuses them (no buffer allocated, whatever the shape); the graphs of a
// bounded number of shapes stay cached; a shape that does not fit grows the
// reserve once; a graph left in a grown arena refuses to run; the bytes other
// graphs left in the shared buffers never reach a result.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/factory/backend_factory.h"
#include "core/error.h"
#include "golden_support.h"
#include "graph/scheduler.h"
#include "models/model.h"
#include "runtime/context.h"

namespace opal {
namespace {

std::unique_ptr<Model> tiny_llama(Registry& reg) {
  return Model::load(test::shared_path("golden/models/tiny-llama-q8_0.gguf"), reg);
}

// A batch of n tokens of sequence 0 from position p0; `outputs`: 0 = last only, 1 = all, 2 = every other one.
Batch make_batch(int n, int p0, int outputs) {
  Batch b;
  for (int i = 0; i < n; ++i) {
    const bool want = outputs == 1 || (outputs == 2 && i % 2 == 0) || i == n - 1;
    b.add(1 + (p0 + i * 7) % 200, p0 + i, 0, want);
  }
  return b;
}

TEST(ComputeMemory, ReservedOnceForEveryBatchShape) {
  auto reg = make_registry({}, 1);
  auto model = tiny_llama(*reg);
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_batch = 64;
  cp.n_ubatch = 32;
  Context ctx(*model, cp);
  EXPECT_TRUE(ctx.compute_reserved().empty());
  const uint64_t buffers0 = ScheduledGraph::compute_buffers_allocated();
  const uint64_t bytes0 = ScheduledGraph::compute_bytes_allocated();
  ctx.decode(make_batch(1, 0, 0));  // reserves from the worst case (32 tokens x 32 outputs)
  const uint64_t buffers = ScheduledGraph::compute_buffers_allocated();
  const uint64_t bytes = ScheduledGraph::compute_bytes_allocated();
  EXPECT_GT(buffers, buffers0);
  EXPECT_GT(bytes, bytes0);
  const auto reserved = ctx.compute_reserved();
  ASSERT_EQ(reserved.count("cpu"), 1u);
  EXPECT_GT(reserved.at("cpu"), 0u);
  EXPECT_GT(reserved.at("inputs"), 0u);

  // Every ubatch shape: 1..64 tokens (above 32: two ubatches), last / all / every other token's logits.
  int shapes = 0;
  for (int outputs = 0; outputs < 3; ++outputs)
    for (int n = 1; n <= 64; ++n) {
      ctx.reset();
      ctx.decode(make_batch(n, 0, outputs));
      ++shapes;
      EXPECT_LE(ctx.n_buckets(), size_t(cp.n_graphs));
    }
  EXPECT_EQ(shapes, 192);
  EXPECT_EQ(ScheduledGraph::compute_buffers_allocated(), buffers) << "a batch shape allocated compute buffers";
  EXPECT_EQ(ScheduledGraph::compute_bytes_allocated(), bytes);
  EXPECT_EQ(ctx.compute_reserved(), reserved);
}

TEST(ComputeMemory, DecodeStaysAllocationFreeAndCached) {
  auto reg = make_registry({}, 1);
  auto model = tiny_llama(*reg);
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_graphs = 2;
  Context ctx(*model, cp);
  ctx.decode(make_batch(9, 0, 0));
  ctx.decode(make_batch(1, 9, 0));
  const uint64_t plans = ScheduledGraph::plans_built();
  const uint64_t bytes = ScheduledGraph::compute_bytes_allocated();
  for (int p = 10; p < 40; ++p) ctx.decode(make_batch(1, p, 0));
  EXPECT_EQ(ScheduledGraph::plans_built(), plans) << "decode re-planned per token";
  EXPECT_EQ(ScheduledGraph::compute_bytes_allocated(), bytes);
  // a third shape evicts the least recently used one (the 9-token prefill), not decode's
  ctx.decode(make_batch(3, 40, 0));
  EXPECT_EQ(ctx.n_buckets(), 2u);
  ctx.decode(make_batch(1, 43, 0));
  EXPECT_EQ(ScheduledGraph::plans_built(), plans + 1);
  EXPECT_EQ(ScheduledGraph::compute_bytes_allocated(), bytes);
}

TEST(ComputeMemory, EvictedAndSharedGraphsGiveTheSameLogits) {
  // One cached graph (every shape change rebuilds into the shared buffers)
  // against eight: the logits must be bit-identical.
  auto reg = make_registry({}, 1);
  auto model = tiny_llama(*reg);
  ContextParams one, eight;
  one.n_ctx = eight.n_ctx = 256;
  one.n_ubatch = eight.n_ubatch = 16;
  one.n_graphs = 1;
  Context a(*model, one), b(*model, eight);
  int pos = 0;
  for (int n : {5, 1, 1, 17, 3, 1, 16, 2, 1, 40, 1}) {
    const Batch batch = make_batch(n, pos, n % 3 == 0 ? 1 : 2);
    pos += n;
    a.decode(batch);
    b.decode(batch);
    ASSERT_EQ(a.n_outputs(), b.n_outputs());
    for (int64_t i = 0; i < a.n_outputs(); ++i)
      ASSERT_EQ(std::memcmp(a.logits(i), b.logits(i), size_t(a.n_vocab()) * sizeof(float)), 0)
          << "batch of " << n << ", output " << i;
  }
  EXPECT_EQ(a.n_buckets(), 1u);
}

TEST(ComputeMemory, OversizeShapeGrowsTheReserveOnce) {
  auto reg = make_registry({}, 1);
  auto model = tiny_llama(*reg);
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_ubatch = 8;
  Context ctx(*model, cp);
  ctx.decode(make_batch(1, 0, 0));
  const auto reserved = ctx.compute_reserved();
  const uint64_t buffers = ScheduledGraph::compute_buffers_allocated();
  ctx.bucket(40, 40);  // more than n_ubatch: the reserve grows (with a message on stderr)
  EXPECT_GT(ScheduledGraph::compute_buffers_allocated(), buffers);
  EXPECT_GT(ctx.compute_reserved().at("cpu"), reserved.at("cpu"));
  EXPECT_EQ(ctx.n_buckets(), 1u) << "graphs bound to the old buffers must be dropped";
  const uint64_t grown = ScheduledGraph::compute_buffers_allocated();
  ctx.bucket(30, 1);
  ctx.decode(make_batch(1, 1, 0));  // rebuilt into the grown buffers, and still right
  EXPECT_EQ(ctx.n_outputs(), 1);
  EXPECT_EQ(ScheduledGraph::compute_buffers_allocated(), grown);
  EXPECT_THROW(ctx.bucket(4, 5), Error);  // more outputs than tokens
  EXPECT_THROW(ctx.bucket(0, 0), Error);
}

TEST(ComputeMemory, GraphInAGrownArenaRefusesToRun) {
  auto reg = make_registry({}, 1);
  auto graph_of = [](int64_t n) {
    auto g = std::make_unique<Graph>();
    Tensor* x = g->new_leaf("x", DType::F32, {n, 1, 1, 1}, TensorRole::Input);
    g->mark_output(g->mul(x, x));
    return g;
  };
  ComputeArena arena;
  Scheduler sched(*reg);
  auto small = sched.schedule(graph_of(16), &arena);
  small->run();
  const auto before = arena.reserved();
  auto big = sched.schedule(graph_of(4096), &arena);
  EXPECT_GT(arena.reserved().at("cpu"), before.at("cpu"));
  EXPECT_NE(arena.last_growth().find("cpu"), std::string::npos) << arena.last_growth();
  big->run();
  try {
    small->run();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grown"), std::string::npos) << e.what();
  }
  // a graph that fits reuses the grown buffers
  const uint64_t buffers = ScheduledGraph::compute_buffers_allocated();
  sched.schedule(graph_of(1024), &arena)->run();
  EXPECT_EQ(ScheduledGraph::compute_buffers_allocated(), buffers);
}

// A batch of several sequences, like the server's: seq s gets n_s tokens from position p_s.
Batch multi_seq_batch(const std::vector<int>& lens, const std::vector<int>& starts, bool all_logits) {
  Batch b;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int i = 0; i < lens[s]; ++i)
      b.add(1 + (int(s) * 31 + i * 7) % 200, starts[s] + i, int32_t(s), all_logits || i == lens[s] - 1);
  return b;
}

TEST(ComputeMemory, StaleBytesInTheSharedBuffersDoNotLeakIntoResults) {
  // The same batches in a fresh context and in one whose shared buffers hold
  // the bytes of other graphs (every op must write what it later reads).
  auto reg = make_registry({}, 1);
  auto model = tiny_llama(*reg);
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_ubatch = 32;
  Context dirty(*model, cp);
  for (int n : {32, 17, 5, 29}) {
    dirty.decode(make_batch(n, 0, 1));
    dirty.reset();
  }
  Context fresh(*model, cp);
  const std::vector<Batch> steps = {multi_seq_batch({7, 5, 9}, {0, 0, 0}, false),
                                    multi_seq_batch({1, 1, 1}, {7, 5, 9}, true),
                                    multi_seq_batch({3, 1, 12}, {8, 6, 10}, false)};
  for (size_t k = 0; k < steps.size(); ++k) {
    fresh.decode(steps[k]);
    dirty.decode(steps[k]);
    ASSERT_EQ(fresh.n_outputs(), dirty.n_outputs());
    for (int64_t i = 0; i < fresh.n_outputs(); ++i)
      ASSERT_EQ(std::memcmp(fresh.logits(i), dirty.logits(i), size_t(fresh.n_vocab()) * sizeof(float)), 0)
          << "step " << k << ", output " << i;
  }
}

}  // namespace
}  // namespace opal
