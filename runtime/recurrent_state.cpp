// Per-sequence recurrent state (runtime/recurrent_state.h): slots, position
// bookkeeping, checkpoints and the sequence operations on a fixed-size state.
#include "runtime/recurrent_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace opal {

RecurrentState::RecurrentState(const HParams& hp, int64_t n_slots, BufferType& bt) : n_slots_(n_slots) {
  if (n_slots <= 0 || n_slots > 4096) fail("recurrent state: the number of sequences must be 1..4096, got {}", n_slots);
  auto init = [&](Tensor& t, const std::string& name, int64_t e) {
    t.name = name;
    t.type = DType::F32;
    t.ne = {e, n_slots, 1, 1};
    t.nb = contiguous_strides(t.type, t.ne);
    t.role = TensorRole::Cache;
    buffers_.push_back(bt.allocate(t.nbytes()));
    t.buffer = buffers_.back().get();
    t.data = t.buffer->base();
  };
  shift_att_.resize(size_t(hp.n_layer));
  shift_ffn_.resize(size_t(hp.n_layer));
  wkv_.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    init(shift_att_[size_t(il)], fmt::format("state_shift_att.{}", il), hp.n_state_shift());
    init(shift_ffn_[size_t(il)], fmt::format("state_shift_ffn.{}", il), hp.n_state_shift());
    init(wkv_[size_t(il)], fmt::format("state_wkv.{}", il), hp.n_state_wkv());
  }
}

void RecurrentState::zero_slot(int32_t slot) {
  for (auto* v : {&shift_att_, &shift_ffn_, &wkv_})
    for (Tensor& t : *v) std::memset(static_cast<uint8_t*>(t.data) + uint64_t(slot) * t.nb[1], 0, t.nb[1]);
}

void RecurrentState::save(int32_t slot, std::vector<float>& out) const {
  out.clear();
  for (const auto* v : {&shift_att_, &shift_ffn_, &wkv_})
    for (const Tensor& t : *v) {
      const float* p = reinterpret_cast<const float*>(static_cast<const uint8_t*>(t.data) + uint64_t(slot) * t.nb[1]);
      out.insert(out.end(), p, p + t.ne[0]);
    }
}

void RecurrentState::load(int32_t slot, const std::vector<float>& in) {
  size_t off = 0;
  for (auto* v : {&shift_att_, &shift_ffn_, &wkv_})
    for (Tensor& t : *v) {
      std::memcpy(static_cast<uint8_t*>(t.data) + uint64_t(slot) * t.nb[1], in.data() + off, t.nb[1]);
      off += size_t(t.ne[0]);
    }
}

void RecurrentState::copy_slot(int32_t from, int32_t to) {
  for (auto* v : {&shift_att_, &shift_ffn_, &wkv_})
    for (Tensor& t : *v) {
      uint8_t* base = static_cast<uint8_t*>(t.data);
      std::memcpy(base + uint64_t(to) * t.nb[1], base + uint64_t(from) * t.nb[1], t.nb[1]);
    }
}

int32_t RecurrentState::free_slot() const {
  std::vector<bool> used(size_t(n_slots_), false);
  for (const auto& [id, s] : seqs_) used[size_t(s.slot)] = true;
  for (int32_t i = 0; i < int32_t(n_slots_); ++i)
    if (!used[size_t(i)]) return i;
  return -1;
}

std::vector<int32_t> RecurrentState::prepare(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq) {
  std::map<int32_t, int32_t> last;  // seq -> last position so far
  int64_t n_new = 0;
  for (size_t i = 0; i < pos.size(); ++i) {
    auto it = last.find(seq[i]);
    if (it == last.end()) {
      auto s = seqs_.find(seq[i]);
      if (s != seqs_.end()) {
        it = last.emplace(seq[i], s->second.pos_max).first;
      } else {
        ++n_new;
        last.emplace(seq[i], pos[i]);  // a new sequence may start anywhere
        continue;
      }
    }
    if (pos[i] != it->second + 1)
      fail(
          "recurrent state: sequence {} is at position {}, so its next token must be at position {}, not {} (batch "
          "index {}); a recurrent model cannot skip or revisit positions (remove the sequence to restart it)",
          seq[i], it->second, it->second + 1, pos[i], i);
    it->second = pos[i];
  }
  if (int64_t(seqs_.size()) + n_new > n_slots_)
    fail(
        "recurrent state: the batch needs {} live sequences but the context holds states for {} (raise the number "
        "of parallel sequences or remove finished ones)",
        int64_t(seqs_.size()) + n_new, n_slots_);
  std::vector<int32_t> slots(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    auto s = seqs_.find(seq[i]);
    if (s == seqs_.end()) {
      Seq fresh;
      fresh.slot = free_slot();
      zero_slot(fresh.slot);
      s = seqs_.emplace(seq[i], std::move(fresh)).first;
    }
    slots[i] = s->second.slot;
  }
  return slots;
}

void RecurrentState::commit(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq, size_t begin,
                            size_t end) {
  std::map<int32_t, int> count;
  for (size_t i = begin; i < end; ++i) {
    Seq& s = seqs_.at(seq[i]);
    if (s.pos_min < 0) s.pos_min = pos[i];
    s.pos_max = pos[i];
    ++count[seq[i]];
  }
  for (const auto& [id, n] : count)
    if (n > 1) checkpoint(id);
}

void RecurrentState::checkpoint(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.pos_max < 0) return;
  Seq& s = it->second;
  if (!s.checkpoints.empty() && s.checkpoints.back().pos == s.pos_max) return;
  Checkpoint c;
  if (s.checkpoints.size() >= kMaxCheckpoints) {  // reuse the oldest one's memory
    c = std::move(s.checkpoints.front());
    s.checkpoints.erase(s.checkpoints.begin());
  }
  c.pos = s.pos_max;
  save(s.slot, c.data);
  s.checkpoints.push_back(std::move(c));
}

void RecurrentState::clear() { seqs_.clear(); }

void RecurrentState::drop(int32_t seq) { seqs_.erase(seq); }

void RecurrentState::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
  if (seq < 0) {
    std::vector<int32_t> ids;
    for (const auto& [id, s] : seqs_) ids.push_back(id);
    for (int32_t id : ids) seq_rm(id, p0, p1);
    return;
  }
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  if (p0 < 0) p0 = 0;
  const bool to_end = p1 < 0 || p1 > s.pos_max;
  if (p0 > s.pos_max || (p1 >= 0 && p1 <= s.pos_min) || p1 == p0) return;  // nothing of the sequence is in range
  if (p0 <= s.pos_min && to_end) {
    drop(seq);  // the whole sequence: reset
    return;
  }
  if (!to_end)
    fail(
        "recurrent state: cannot remove positions [{}, {}) of sequence {} and keep its later positions (up to {}): "
        "a recurrent state cannot forget part of its history",
        p0, p1, seq, s.pos_max);
  for (size_t i = s.checkpoints.size(); i-- > 0;) {
    if (s.checkpoints[i].pos != p0 - 1) continue;
    load(s.slot, s.checkpoints[i].data);
    s.pos_max = p0 - 1;
    s.checkpoints.resize(i + 1);
    return;
  }
  std::string have;
  for (const Checkpoint& c : s.checkpoints) have += fmt::format("{}{}", have.empty() ? "" : ", ", c.pos + 1);
  fail(
      "recurrent state: cannot truncate sequence {} to its first {} positions: its state holds {} positions and "
      "there is no checkpoint there (checkpoints after {} positions: {})",
      seq, p0, s.pos_max + 1, have.empty() ? "0" : "", have.empty() ? "none" : have);
}

void RecurrentState::seq_cp(int32_t src, int32_t dst, int32_t, int32_t) {
  if (src == dst) return;
  auto it = seqs_.find(src);
  if (it == seqs_.end()) {
    drop(dst);
    return;
  }
  auto d = seqs_.find(dst);
  if (d == seqs_.end()) {
    const int32_t slot = free_slot();
    if (slot < 0)
      fail("recurrent state: copying sequence {} to {} needs a free state slot, and all {} are in use", src, dst,
           n_slots_);
    d = seqs_.emplace(dst, Seq{}).first;
    d->second.slot = slot;
  }
  const Seq& s = seqs_.at(src);
  Seq& t = d->second;
  copy_slot(s.slot, t.slot);
  t.pos_min = s.pos_min;
  t.pos_max = s.pos_max;
  t.checkpoints = s.checkpoints;
}

void RecurrentState::seq_keep(int32_t seq) {
  for (auto it = seqs_.begin(); it != seqs_.end();) it = it->first == seq ? std::next(it) : seqs_.erase(it);
}

void RecurrentState::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || delta == 0) return;
  Seq& s = it->second;
  if (p0 < 0) p0 = 0;
  auto in = [&](int32_t p) { return p >= p0 && (p1 < 0 || p < p1); };
  if (in(s.pos_min) != in(s.pos_max))
    fail("recurrent state: cannot shift positions [{}, {}) of sequence {} (it holds {}..{}): a state moves as a whole",
         p0, p1, seq, s.pos_min, s.pos_max);
  if (!in(s.pos_max)) return;
  if (s.pos_min + delta < 0) {
    drop(seq);
    return;
  }
  s.pos_min += delta;
  s.pos_max += delta;
  for (Checkpoint& c : s.checkpoints) c.pos += delta;
}

int32_t RecurrentState::seq_pos_min(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.pos_min;
}

int32_t RecurrentState::seq_pos_max(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.pos_max;
}

int32_t RecurrentState::reusable_prefix(int32_t seq, int32_t n) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || n <= 0) return 0;
  const Seq& s = it->second;
  if (n > s.pos_max) return n;  // nothing to remove
  int32_t best = 0;
  for (const Checkpoint& c : s.checkpoints)
    if (c.pos + 1 <= n) best = std::max(best, c.pos + 1);
  return best;
}

std::vector<int32_t> RecurrentState::checkpoints(int32_t seq) const {
  std::vector<int32_t> v;
  auto it = seqs_.find(seq);
  if (it != seqs_.end())
    for (const Checkpoint& c : it->second.checkpoints) v.push_back(c.pos);
  return v;
}

}  // namespace opal
