// The recurrent state of a recurrent model (RWKV-7), beside the KV cache of
// attention models: per layer the token-shift states of the time mix and the
// channel mix (F32 [n_embd, n_slots]) and the WKV state (F32 [n_embd * head
// size, n_slots]), always f32 whatever the KV type (as llama.cpp). A sequence
// id is given a slot on its first token; its state is fixed-size, so the
// context is limited by positions (n_ctx) and by the number of live sequences
// (n_slots), never by memory per token.
//
// What the sequence operations mean for a state (llama.cpp's recurrent memory,
// plus checkpoints):
//   - seq_rm of a whole sequence (or of every position from its first) resets
//     it; of positions past its last: nothing to do; of a suffix [p0, end):
//     restores the checkpoint taken after position p0 - 1, or throws naming
//     the checkpoints there are; of a range with positions after it kept:
//     throws (a state cannot forget the middle of its history).
//   - seq_cp copies the whole state (and its checkpoints) to dst.
//   - seq_keep drops every other sequence.
//   - seq_add shifts the recorded positions (the state itself has none).
// Checkpoints: a copy of a sequence's state after a given position. decode()
// takes one for each sequence that got more than one token in a batch (the
// end of each prompt chunk), keeping the latest kMaxCheckpoints per sequence,
// so a prompt that shares a prefix with the cached one restarts from there.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "graph/backend.h"
#include "models/hparams.h"

namespace opal {

class RecurrentState {
 public:
  static constexpr size_t kMaxCheckpoints = 4;

  RecurrentState(const HParams& hp, int64_t n_slots, BufferType& buffer_type);

  int64_t n_slots() const { return n_slots_; }
  Tensor* shift_att(int64_t il) { return &shift_att_[size_t(il)]; }
  Tensor* shift_ffn(int64_t il) { return &shift_ffn_[size_t(il)]; }
  Tensor* wkv(int64_t il) { return &wkv_[size_t(il)]; }

  // The slot of each token of a batch, giving new sequences a zeroed slot.
  // Throws opal::Error (changing nothing) when a sequence's positions do not
  // continue it (pos = last + 1 within the batch and after the cached ones)
  // or when more sequences than slots would be live.
  std::vector<int32_t> prepare(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq);
  // Records tokens [begin, end) of a prepared batch as decoded.
  void commit(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq, size_t begin, size_t end);
  // Saves a checkpoint of seq's state after its last position.
  void checkpoint(int32_t seq);

  void clear();
  void seq_rm(int32_t seq, int32_t p0, int32_t p1);
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  void seq_keep(int32_t seq);
  void seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
  int32_t seq_pos_min(int32_t seq) const;
  int32_t seq_pos_max(int32_t seq) const;
  // The longest prefix of seq's first n positions that seq_rm(seq, m, -1) can
  // keep: n itself when nothing follows, a checkpoint's length, or 0.
  int32_t reusable_prefix(int32_t seq, int32_t n) const;
  // Positions after which seq has a checkpoint, oldest first.
  std::vector<int32_t> checkpoints(int32_t seq) const;
  int64_t n_live() const { return int64_t(seqs_.size()); }

 private:
  struct Checkpoint {
    int32_t pos = -1;  // the state is the one after this position
    std::vector<float> data;
  };
  struct Seq {
    int32_t slot = -1;
    int32_t pos_min = -1, pos_max = -1;
    std::vector<Checkpoint> checkpoints;
  };
  void zero_slot(int32_t slot);
  void save(int32_t slot, std::vector<float>& out) const;
  void load(int32_t slot, const std::vector<float>& in);
  void copy_slot(int32_t from, int32_t to);
  int32_t free_slot() const;
  void drop(int32_t seq);

  int64_t n_slots_;
  std::vector<Tensor> shift_att_, shift_ffn_, wkv_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::map<int32_t, Seq> seqs_;
};

}  // namespace opal
