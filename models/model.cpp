#include "models/model.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"
#include "graph/scheduler.h"
#include "models/architecture.h"
#include "models/tensor_table.h"

namespace opal {

Model::~Model() = default;

Tensor* Model::weight(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Tensor& Model::require(const std::string& name) const {
  Tensor* t = weight(name);
  if (!t) fail("{}: tensor '{}' is missing", path_, name);
  return *t;
}

namespace {

// A graph of one token over placeholder inputs and caches, used at load to see
// which ops read each weight (placement) and to reject unsupported ops early.
struct ProbeGraph {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  GraphInputs in;
  std::deque<Tensor> caches;
};

ProbeGraph probe_graph(const Model& m) {
  ProbeGraph p;
  const HParams& hp = m.hparams();
  const int64_t T = 1, n_cells = 1;
  Graph& g = *p.g;
  p.in.tokens = g.new_leaf("tokens", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  p.in.positions = g.new_leaf("positions", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  p.in.token_info = g.new_leaf("token_info", DType::I32, {2, T, 1, 1}, TensorRole::Input);
  p.in.cell_info = g.new_leaf("cell_info", DType::I32, {2, n_cells, 1, 1}, TensorRole::Input);
  p.in.store_cells = g.new_leaf("store_cells", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
  if (hp.recurrent) {
    p.in.state_slots = g.new_leaf("state_slots", DType::I32, {T, 1, 1, 1}, TensorRole::Input);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      auto state = [&](const char* what, int64_t e) {
        return g.new_leaf(fmt::format("{}.{}", what, il), DType::F32, {e, 1, 1, 1}, TensorRole::Input);
      };
      p.in.shift_att.push_back(state("state_shift_att", hp.n_state_shift()));
      p.in.shift_ffn.push_back(state("state_shift_ffn", hp.n_state_shift()));
      p.in.wkv_state.push_back(state("state_wkv", hp.n_state_wkv()));
    }
  }
  for (int64_t il = 0; il < hp.n_layer && !hp.recurrent; ++il) {
    if (!hp.has_kv(il)) {  // reads an earlier layer's K/V (Gemma 4)
      p.in.k_cache.push_back(nullptr);
      p.in.v_cache.push_back(nullptr);
      continue;
    }
    p.in.k_cache.push_back(
        g.new_leaf(fmt::format("cache_k.{}", il), DType::F16, {hp.n_embd_k_gqa(il), n_cells, 1, 1}, TensorRole::Input));
    p.in.v_cache.push_back(
        g.new_leaf(fmt::format("cache_v.{}", il), DType::F16, {hp.n_embd_v_gqa(il), n_cells, 1, 1}, TensorRole::Input));
  }
  BuildContext c{g, m, hp, p.in, T};
  g.mark_output(m.arch().build(c));
  return p;
}

}  // namespace

// Load-time repacking (LoadOptions::repack; docs/cpu-kernels.md "Decode at
// the wall"): each weight on the host device whose buffer type names a
// layout for it, given every node of the probe graph that reads it, and that
// no other device could run any of those nodes (an accelerator or its copies
// would read the repacked bytes as the GGUF's). Weights that alias the file's
// mapping are rewritten in place: the mapping is made writable for the
// rewrite and read-only again after it, so a repacked tensor's pages become
// anonymous memory (copy-on-write) under --lm mmap / populate / lock, and stay
// the anonymous copy they already were under --lm huge / read.
void Model::repack_weights(const Graph& probe) {
  std::map<const Tensor*, std::vector<const Tensor*>> consumers;
  for (const Tensor* n : probe.nodes())
    for (const Tensor* s : n->src)
      if (s && s->is_leaf() && s->role == TensorRole::Weight) consumers[s].push_back(n);
  Device& host = registry_.host();
  BufferType& bt = host.weight_buffer_type();
  std::vector<std::pair<Tensor*, uint8_t>> todo;
  for (auto& [name, t] : by_name_) {
    auto placed = weight_placement_.find(t);
    auto readers = consumers.find(t);
    if (placed == weight_placement_.end() || placed->second.device != &host || readers == consumers.end()) continue;
    if (!t->data || !t->buffer || !t->buffer->type().host_visible()) continue;
    bool elsewhere = false;
    for (Device* d : registry_.devices())
      for (const Tensor* c : readers->second)
        if (d != &host && d->supports(*c)) elsewhere = true;
    if (elsewhere) continue;
    if (const uint8_t layout = bt.repack_layout(*t, readers->second)) todo.emplace_back(t, layout);
  }
  if (todo.empty()) return;
  // The file's mappings (every part of a split model), writable while the repack runs.
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<std::pair<uint8_t*, uint64_t>> spans;
  for (const auto& part : file_->parts()) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(part->data()) / uintptr_t(page) * uintptr_t(page);
    const uintptr_t e = (reinterpret_cast<uintptr_t>(part->data()) + part->size() + uintptr_t(page) - 1) /
                        uintptr_t(page) * uintptr_t(page);
    spans.emplace_back(reinterpret_cast<uint8_t*>(b), uint64_t(e - b));
  }
  for (const auto& [b, n] : spans)
    if (::mprotect(b, n, PROT_READ | PROT_WRITE) != 0)
      fail("{}: cannot make the weights' mapping writable for the repack ({}); --no-repack skips it", path_,
           std::strerror(errno));
  for (auto& [t, layout] : todo) {
    bt.repack_weight(*t, layout);
    ++n_repacked_;
    repacked_bytes_ += t->nbytes();
  }
  for (const auto& [b, n] : spans) ::mprotect(b, n, PROT_READ);
}

std::unique_ptr<Model> Model::load(const std::string& path, Registry& registry, const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model(registry));
  m->path_ = path;
  m->file_ = std::make_unique<gguf::File>(gguf::File::open_model(path, opts.load_mode));  // every part of a split
  const gguf::File& f = *m->file_;
  const std::string arch_name = f.get_string("general.architecture", "");
  if (arch_name.empty()) fail("{}: general.architecture is missing", path);
  m->arch_ = &find_architecture(arch_name);
  const DecoderDesc& desc = m->arch_->decoder;
  m->hp_ =
      m->arch_->read_hparams
          ? m->arch_->read_hparams(f, arch_name)
          : HParams::from_gguf(f, arch_name, desc.rope_mode,
                               {.swa_period = desc.sliding_period, .final_logit_softcap = desc.default_logit_softcap});
  if (m->hp_.n_vocab <= 0) {
    const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
    if (!emb) fail("{}: tensor 'token_embd.weight' is missing", path);
    if (emb->ne.size() < 2) fail("{}: tensor 'token_embd.weight' must be 2-D, found {}", path, emb->shape_string());
    m->hp_.n_vocab = emb->ne[1];
  }
  TensorTable table(*m, f);
  m->arch_->declare_tensors(*m->arch_, table, m->hp_);

  // Decide where each weight lives, then give it bytes there.
  Scheduler sched(registry);
  ProbeGraph placement_probe = probe_graph(*m);  // kept for the repack below: who reads each weight
  m->weight_placement_ = sched.place_weights(*placement_probe.g);
  Device& host = registry.host();
  std::vector<std::unique_ptr<Buffer>> file_views;  // one per part of a split model
  bool views = true;
  for (const auto& part : f.parts()) {
    file_views.push_back(host.weight_buffer_type().wrap_host(part->data(), part->size()));
    views = views && file_views.back();
  }
  std::map<Device*, std::vector<Tensor*>> per_device;
  for (auto& [name, t] : m->by_name_) {
    auto it = m->weight_placement_.find(t);
    Device* d = it != m->weight_placement_.end() ? it->second.device : &host;
    if (it == m->weight_placement_.end()) m->weight_placement_[t] = {d, "not read by the graph"};
    per_device[d].push_back(t);
  }
  for (auto& [d, ts] : per_device) {
    BufferType& bt = d->weight_buffer_type();
    const bool in_place = bt.host_visible() && views && &bt == &host.weight_buffer_type();
    uint64_t total = 0;
    std::vector<uint64_t> offs;
    for (Tensor* t : ts) {
      offs.push_back(total);
      total += (bt.weight_size(*t) + bt.alignment() - 1) / bt.alignment() * bt.alignment();
    }
    Buffer* buf = nullptr;
    if (!in_place) {
      m->buffers_.push_back(bt.allocate(std::max<uint64_t>(total, 64)));
      buf = m->buffers_.back().get();
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      Tensor* t = ts[i];
      const gguf::TensorInfo* info = f.find_tensor(t->name);
      const void* bytes = info->data;
      if (info->flat_blocks) {
        if (!can_dequantize(info->type))
          fail("{}: tensor '{}' of type {} has rows that are not whole blocks and cannot be dequantized", path, t->name,
               dtype_name(info->type));
        auto& v = m->dequantized_.emplace_back(size_t(info->n_elements()));
        dequantize_row(info->type, info->data, v.data(), info->n_elements());
        bytes = v.data();
      }
      if (in_place && !info->flat_blocks) {
        t->buffer = file_views[info->part].get();
        t->data = const_cast<uint8_t*>(info->data);
      } else if (in_place) {
        m->buffers_.push_back(bt.wrap_host(bytes, t->nbytes()));
        t->buffer = m->buffers_.back().get();
        t->data = const_cast<void*>(bytes);
      } else {
        bt.upload_weight(*t, bytes, *buf, offs[i]);
      }
    }
  }
  for (auto& v : file_views)
    if (v) m->buffers_.push_back(std::move(v));
  if (opts.repack) m->repack_weights(*placement_probe.g);

  // Reject ops no device can run (e.g. a weight type without a kernel) now,
  // with the scheduler's message, rather than at the first decode.
  {
    ProbeGraph probe = probe_graph(*m);
    sched.schedule(std::move(probe.g));
  }
  return m;
}

}  // namespace opal
