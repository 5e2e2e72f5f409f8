#include "graph/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"
#include "graph/offset_allocator.h"

namespace opal {
namespace {

std::atomic<uint64_t> g_plans_built{0};
std::atomic<uint64_t> g_compute_buffers{0};
std::atomic<uint64_t> g_compute_bytes{0};

// Every compute or input buffer the scheduler or an arena allocates, counted.
std::unique_ptr<Buffer> allocate_compute(BufferType& type, uint64_t bytes) {
  auto buf = type.allocate(bytes);
  g_compute_buffers.fetch_add(1);
  g_compute_bytes.fetch_add(bytes);
  return buf;
}

std::string size_text(uint64_t bytes) {
  if (bytes < (uint64_t(1) << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024.0);
  return fmt::format("{:.2f} MiB", double(bytes) / double(1 << 20));
}

// Runs an accelerator's faulted node on the host device: a one-node host plan,
// compiled on the node's first fault and kept.
class SchedulerHostFallback : public HostFallback {
 public:
  explicit SchedulerHostFallback(Device& host) : host_(host) {}
  void run(Tensor& node) override {
    auto it = plans_.find(&node);
    if (it == plans_.end()) {
      Segment one;
      one.device = &host_;
      one.nodes = {&node};
      it = plans_.emplace(&node, host_.executor().compile(one)).first;
    }
    host_.executor().run(*it->second, nullptr);
  }

 private:
  Device& host_;
  std::map<const Tensor*, std::unique_ptr<Plan>> plans_;
};

// True if the host can read every source and the output of every node of the segment.
bool host_can_run(const Device& host, const Segment& s) {
  auto readable = [&](const Tensor* t) {
    const Tensor* st = t->storage();
    return !st->buffer || host.can_access(*st->buffer);
  };
  for (const Tensor* n : s.nodes) {
    if (!readable(n)) return false;
    for (const Tensor* src : n->src)
      if (src && !readable(src)) return false;
  }
  return true;
}

bool reads_weight_like(const Tensor* s) {
  const Tensor* st = s->storage();
  return st->is_leaf() && (st->role == TensorRole::Weight || st->role == TensorRole::Cache);
}

}  // namespace

Device* device_of(const Registry& reg, const Tensor& t) {
  const Tensor* st = t.storage();
  if (!st->buffer) return st->role == TensorRole::Input ? &reg.host() : nullptr;
  for (Device* d : reg.devices()) {
    BufferType* bt = &st->buffer->type();
    if (bt == &d->weight_buffer_type() || bt == &d->compute_buffer_type()) return d;
  }
  return nullptr;
}

uint64_t ScheduledGraph::plans_built() { return g_plans_built.load(); }
uint64_t ScheduledGraph::compute_buffers_allocated() { return g_compute_buffers.load(); }
uint64_t ScheduledGraph::compute_bytes_allocated() { return g_compute_bytes.load(); }

void ComputeNeeds::merge(const ComputeNeeds& o) {
  for (const auto& [d, bytes] : o.compute) compute[d] = std::max(compute[d], bytes);
  inputs = std::max(inputs, o.inputs);
  if (!input_type) input_type = o.input_type;
}

bool ComputeArena::reserve(const ComputeNeeds& needs) {
  std::string what;
  auto grow = [&](Entry& e, BufferType& type, uint64_t need, const std::string& name) {
    need = std::max<uint64_t>(need, 64);
    if (e.buffer && e.size >= need) return;
    what += fmt::format("{}{}: {} -> {}", what.empty() ? "" : "; ", name, size_text(e.size), size_text(need));
    ++generation_;  // graphs bound to the old buffer are stale from here on
    e.buffer.reset();
    e.size = 0;
    e.buffer = allocate_compute(type, need);
    e.size = need;
  };
  for (const auto& [d, bytes] : needs.compute) grow(compute_[d], d->compute_buffer_type(), bytes, d->name());
  if (needs.inputs) {
    if (!needs.input_type) fail("compute arena: no buffer type for the graph inputs");
    grow(inputs_, *needs.input_type, needs.inputs, "inputs");
  }
  if (what.empty()) return false;
  last_growth_ = what;
  return true;
}

std::map<std::string, uint64_t> ComputeArena::reserved() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [d, e] : compute_) out[d->name()] += e.size;
  if (inputs_.buffer) out["inputs"] = inputs_.size;
  return out;
}

const Placement& ScheduledGraph::placement(const Tensor* node) const {
  auto it = placement_.find(node);
  if (it == placement_.end()) fail("no placement for tensor '{}'", node->name);
  return it->second;
}

size_t ScheduledGraph::n_copies() const {
  size_t n = 0;
  for (const auto& c : copies_) n += c.size();
  return n;
}

uint64_t ScheduledGraph::bytes_copied_per_run() const {
  uint64_t n = 0;
  for (const auto& cs : copies_)
    for (const auto& c : cs) n += c.src->nbytes();
  return n;
}

void ScheduledGraph::read(const Tensor* t, void* dst, uint64_t nbytes) const {
  const Tensor* st = t->storage();
  if (!st->buffer || st->buffer->type().host_visible() || !t->data) {
    std::memcpy(dst, t->data, nbytes);
    return;
  }
  const uint64_t off = uint64_t(static_cast<const uint8_t*>(t->data) - static_cast<const uint8_t*>(st->buffer->base()));
  st->buffer->read(off, dst, nbytes);
}

void ScheduledGraph::run(RunHooks* hooks) {
  if (arena_ && arena_->generation() != arena_generation_)
    fail("a graph scheduled into compute buffers that have grown since cannot run: schedule it again");
  for (size_t i = 0; i < segments_.size(); ++i) {
    for (const CrossCopy& c : copies_[i]) {
      if (hooks) hooks->before_copy(c, *segments_[i].device);
      const uint64_t n = c.src->nbytes();
      Buffer* sb = c.src->buffer;
      Buffer* db = c.dst->buffer;
      const bool s_host = !sb || sb->type().host_visible();
      const bool d_host = db->type().host_visible();
      auto off = [](const Tensor* t) {
        return uint64_t(static_cast<uint8_t*>(t->data) - static_cast<uint8_t*>(t->buffer->base()));
      };
      if (s_host && d_host) {
        std::memcpy(c.dst->data, c.src->data, n);
      } else if (s_host) {
        db->write(off(c.dst), c.src->data, n);
      } else if (d_host) {
        sb->read(off(c.src), c.dst->data, n);
      } else {
        sb->read(off(c.src), staging_.data(), n);
        db->write(off(c.dst), staging_.data(), n);
      }
      if (hooks) hooks->after_copy(c, *segments_[i].device);
    }
    segments_[i].device->executor().run(*plans_[i], hooks);
  }
}

std::map<const Tensor*, Placement> Scheduler::place_weights(const Graph& graph) const {
  std::map<const Tensor*, std::vector<const Tensor*>> consumers;
  for (const Tensor* n : graph.nodes())
    for (const Tensor* s : n->src)
      if (s && s->is_leaf() && s->role == TensorRole::Weight) consumers[s].push_back(n);
  std::map<const Tensor*, Placement> out;
  for (const auto& [leaf, cons] : consumers) {
    std::string refusals;
    for (Device* d : registry_.devices()) {
      if (d->role() == DeviceRole::Host) continue;
      Support s = d->supports_weight(*leaf, cons);
      if (s) {
        out[leaf] = {d, fmt::format("{} runs every op that reads it", d->name())};
        break;
      }
      refusals += fmt::format("{}{}: {}", refusals.empty() ? "" : "; ", d->name(), s.reason);
    }
    if (!out.count(leaf))
      out[leaf] = {&registry_.host(), refusals.empty() ? "host (no accelerator)" : "host (fallback: " + refusals + ")"};
  }
  return out;
}

Placement Scheduler::place_node(const Tensor& node, const std::map<const Tensor*, Placement>& placed) const {
  // Rule 2: weights and caches pull the ops that read them.
  for (const Tensor* s : node.src) {
    if (!s || !reads_weight_like(s)) continue;
    Device* d = device_of(registry_, *s);
    if (!d) continue;
    // Host memory an accelerator's kernels can read (Device::can_access, e.g. a
    // KV cache in host memory that the accelerator stages): the accelerator
    // may take the node before the host does.
    if (d->role() == DeviceRole::Host && s->storage()->buffer) {
      for (Device* a : registry_.devices()) {
        if (a->role() == DeviceRole::Host || !a->can_access(*s->storage()->buffer)) continue;
        Support as = a->supports(node);
        if (as) return {a, fmt::format("reads '{}' in host memory that {} can access", s->storage()->name, a->name())};
      }
    }
    Support sup = d->supports(node);
    if (sup) return {d, fmt::format("reads '{}' held on {}", s->storage()->name, d->name())};
    Device& host = registry_.host();
    Support hs = host.supports(node);
    if (!hs)
      fail("node '{}' ({}) reading '{}' ({} {}) is not supported by any device: {}: {}; {}: {}", node.name,
           op_name(node.op), s->storage()->name, dtype_name(s->storage()->type), s->storage()->shape_string(),
           d->name(), sup.reason, host.name(), hs.reason);
    return {&host, fmt::format("reads '{}' held on {}, which cannot run it ({}): host fallback", s->storage()->name,
                               d->name(), sup.reason)};
  }
  // Rule 3: the highest-priority device that supports it; rule 4: the host.
  std::string refusals;
  for (Device* d : registry_.devices()) {
    Support sup = d->supports(node);
    if (sup) {
      if (d->role() == DeviceRole::Host) return {d, refusals.empty() ? "host" : "host (fallback: " + refusals + ")"};
      return {d, fmt::format("highest-priority device supporting {}", op_name(node.op))};
    }
    refusals += fmt::format("{}{}: {}", refusals.empty() ? "" : "; ", d->name(), sup.reason);
  }
  std::string srcs;
  for (const Tensor* s : node.src)
    if (s)
      srcs += fmt::format("{}'{}' {} {}", srcs.empty() ? "" : ", ", s->name, dtype_name(s->type), s->shape_string());
  fail("node '{}' ({} {}, reading {}) is not supported by any device: {}", node.name, op_name(node.op),
       node.shape_string(), srcs, refusals);
}

struct Scheduler::MemoryPlan {
  struct Slot {
    uint64_t off = 0, size = 0;
    Device* dev = nullptr;
  };
  std::map<const Tensor*, Slot> slots;               // computed tensors: offset in their device's buffer
  std::vector<std::pair<Tensor*, uint64_t>> inputs;  // input leaves: offset in the inputs' buffer
  std::vector<Tensor*> remapped_views;               // views re-pointed at a copy
  ComputeNeeds needs;
};

std::unique_ptr<ScheduledGraph> Scheduler::place_and_plan(std::unique_ptr<Graph> graph, MemoryPlan& mp) const {
  auto sg = std::unique_ptr<ScheduledGraph>(new ScheduledGraph());
  sg->graph_ = std::move(graph);
  Graph& g = *sg->graph_;
  Device& host = registry_.host();
  const auto& nodes = g.nodes();

  // ---- placement
  auto home = [&](const Tensor* t) -> Device* {  // device holding a tensor's bytes
    const Tensor* st = t->storage();
    if (st->is_leaf()) {
      Device* d = device_of(registry_, *st);
      return d ? d : &host;
    }
    return sg->placement_.at(st).device;
  };
  for (const Tensor* n : nodes) {
    if (n->op == Op::View) {
      sg->placement_[n] = {home(n), "view: stays with its source"};
      continue;
    }
    sg->placement_[n] = place_node(*n, sg->placement_);
  }

  // ---- segments (views belong to no segment: they cost nothing)
  std::map<const Tensor*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  std::vector<size_t> seg_first;  // node index of each segment's first node
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    if (n->op == Op::View) continue;
    Device* d = sg->placement_[n].device;
    if (sg->segments_.empty() || sg->segments_.back().device != d) {
      sg->segments_.push_back({d, {}});
      seg_first.push_back(i);
    }
    sg->segments_.back().nodes.push_back(n);
  }
  sg->copies_.resize(sg->segments_.size());

  // ---- copies where a device cannot read a source's bytes
  auto accessible = [&](Device* d, Device* holder) {
    if (d == holder) return true;
    return d->role() == DeviceRole::Host && holder->compute_buffer_type().host_visible() &&
           holder->weight_buffer_type().host_visible();
  };
  std::map<std::pair<const Tensor*, Device*>, Tensor*> copy_of;
  std::vector<Tensor*>& remapped_views = mp.remapped_views;
  std::map<const Tensor*, size_t> copy_time;  // copy dst -> node index where it is made
  for (size_t si = 0; si < sg->segments_.size(); ++si) {
    Device* d = sg->segments_[si].device;
    for (Tensor* n : sg->segments_[si].nodes) {
      for (Tensor*& s : n->src) {
        if (!s) continue;
        Tensor* st = s->storage();
        Device* holder = home(st);
        if (accessible(d, holder)) continue;
        if (st->is_leaf() && st->buffer && d->can_access(*st->buffer)) continue;  // e.g. a host KV cache
        auto key = std::make_pair(static_cast<const Tensor*>(st), d);
        Tensor* dst;
        auto it = copy_of.find(key);
        if (it != copy_of.end() && st->role != TensorRole::Cache) {
          dst = it->second;
          if (std::find_if(sg->copies_[si].begin(), sg->copies_[si].end(),
                           [&](const CrossCopy& c) { return c.dst == dst; }) == sg->copies_[si].end() &&
              copy_time[dst] > seg_first[si])
            sg->copies_[si].push_back({st, dst, holder});
        } else {
          dst = &sg->extra_.emplace_back();
          dst->name = st->name + "@" + d->name();
          dst->type = st->type;
          dst->ne = st->ne;
          dst->nb = st->nb;
          dst->role = TensorRole::Compute;
          copy_of[key] = dst;
          copy_time[dst] = seg_first[si];
          sg->copies_[si].push_back({st, dst, holder});
          sg->placement_[dst] = {d, fmt::format("copy of '{}' from {}", st->name, holder->name())};
        }
        if (s == st) {
          s = dst;
        } else {  // a view: re-point a clone of it at the copy
          uint64_t off = 0;
          for (const Tensor* v = s; v != st; v = v->src[0]) off += v->view_offset;
          Tensor* nv = &sg->extra_.emplace_back(*s);
          nv->op = Op::View;
          nv->src = {};
          nv->src[0] = dst;
          nv->view_offset = off;
          remapped_views.push_back(nv);
          s = nv;
        }
      }
    }
  }

  // ---- memory plan: inputs get fixed host bytes; computed tensors share each
  // device's compute buffer by liveness.
  const size_t kForever = std::numeric_limits<size_t>::max();
  std::map<const Tensor*, size_t> last_use;
  auto use = [&](const Tensor* s, size_t at) {
    const Tensor* st = s->storage();
    auto& lu = last_use[st];
    lu = std::max(lu, at);
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Tensor* s : nodes[i]->src)
      if (s) use(s, i);
  for (size_t si = 0; si < sg->segments_.size(); ++si)
    for (const CrossCopy& c : sg->copies_[si]) use(c.src, seg_first[si]);
  for (const Tensor* o : g.outputs()) last_use[o->storage()] = kForever;
  // Views over other views keep their storage alive through last_use of the storage, handled by use().

  using Slot = MemoryPlan::Slot;
  std::map<const Tensor*, Slot>& slots = mp.slots;
  std::map<Device*, OffsetAllocator> allocs;
  auto alloc_for = [&](Device* d) -> OffsetAllocator& {
    auto it = allocs.find(d);
    if (it == allocs.end()) it = allocs.emplace(d, OffsetAllocator(d->compute_buffer_type().alignment())).first;
    return it->second;
  };
  std::map<size_t, std::vector<const Tensor*>> frees;  // node index -> tensors freed after it
  auto place = [&](const Tensor* t, Device* d) {
    Slot s;
    s.size = t->nbytes();
    s.dev = d;
    s.off = alloc_for(d).alloc(s.size);
    slots[t] = s;
    auto lu = last_use.find(t);
    if (lu != last_use.end() && lu->second != kForever) frees[lu->second].push_back(t);
    if (lu == last_use.end()) frees[index.count(t) ? index[t] : 0].push_back(t);  // never read: free right away
  };
  size_t seg = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    while (seg < seg_first.size() && seg_first[seg] == i) {
      for (const CrossCopy& c : sg->copies_[seg])
        if (!slots.count(c.dst)) place(c.dst, sg->segments_[seg].device);
      ++seg;
    }
    const Tensor* n = nodes[i];
    if (n->op != Op::View && n->op != Op::KvStore) place(n, sg->placement_[n].device);
    for (const Tensor* t : frees[i]) {
      auto it = slots.find(t);
      if (it != slots.end()) alloc_for(it->second.dev).release(it->second.off, it->second.size);
    }
  }
  // inputs: host, never reused
  for (Tensor* l : g.leaves())
    if (l->role == TensorRole::Input && !l->buffer) {
      mp.inputs.push_back({l, mp.needs.inputs});
      mp.needs.inputs += align_to(l->nbytes(), 64);
    }
  mp.needs.input_type = &host.compute_buffer_type();
  for (auto& [d, a] : allocs) {
    mp.needs.compute[d] = a.high_water();
    sg->compute_bytes_[d->name()] += a.high_water();
  }
  uint64_t staging = 0;
  for (const auto& cs : sg->copies_)
    for (const auto& c : cs) staging = std::max(staging, c.src->nbytes());
  sg->staging_.resize(staging);
  return sg;
}

ComputeNeeds Scheduler::measure(std::unique_ptr<Graph> graph) const {
  MemoryPlan mp;
  place_and_plan(std::move(graph), mp);
  return mp.needs;
}

std::unique_ptr<ScheduledGraph> Scheduler::schedule(std::unique_ptr<Graph> graph, ComputeArena* arena) const {
  MemoryPlan mp;
  auto sg = place_and_plan(std::move(graph), mp);
  Graph& g = *sg->graph_;
  const auto& nodes = g.nodes();

  // ---- memory: the arena's buffers (grown if this plan does not fit), or the graph's own
  std::map<Device*, Buffer*> buffers;
  Buffer* input_buffer = nullptr;
  if (arena) {
    arena->reserve(mp.needs);
    for (const auto& [d, bytes] : mp.needs.compute) buffers[d] = arena->compute_.at(d).buffer.get();
    if (mp.needs.inputs) input_buffer = arena->inputs_.buffer.get();
    sg->arena_ = arena;
    sg->arena_generation_ = arena->generation();
  } else {
    for (const auto& [d, bytes] : mp.needs.compute) {
      sg->buffers_.push_back(allocate_compute(d->compute_buffer_type(), std::max<uint64_t>(bytes, 64)));
      buffers[d] = sg->buffers_.back().get();
    }
    if (mp.needs.inputs) {
      sg->buffers_.push_back(allocate_compute(*mp.needs.input_type, mp.needs.inputs));
      input_buffer = sg->buffers_.back().get();
    }
  }
  for (auto& [t, s] : mp.slots) {
    Tensor* tt = const_cast<Tensor*>(t);
    Buffer* buf = buffers.at(s.dev);
    tt->data = static_cast<uint8_t*>(buf->base()) + s.off;
    tt->buffer = buf;
  }
  for (auto& [t, off] : mp.inputs) {
    t->data = static_cast<uint8_t*>(input_buffer->base()) + off;
    t->buffer = input_buffer;
  }
  // views and in-place results
  for (Tensor* n : nodes)
    if (n->op == Op::View || n->op == Op::KvStore) {
      n->buffer = n->src[0]->buffer;
      n->data = n->src[0]->data ? static_cast<uint8_t*>(n->src[0]->data) + n->view_offset : nullptr;
    }
  for (Tensor* v : mp.remapped_views) {
    v->buffer = v->src[0]->buffer;
    v->data = static_cast<uint8_t*>(v->src[0]->data) + v->view_offset;
  }

  // ---- compile each segment once
  Device& host_dev = registry_.host();
  for (Segment& s : sg->segments_) {
    if (s.device->role() != DeviceRole::Host && host_can_run(host_dev, s)) {
      sg->fallbacks_.push_back(std::make_unique<SchedulerHostFallback>(host_dev));
      s.fallback = sg->fallbacks_.back().get();
    }
    sg->plans_.push_back(s.device->executor().compile(s));
  }
  g_plans_built.fetch_add(1);
  return sg;
}

}  // namespace opal
