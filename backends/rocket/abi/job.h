// Task and job structures shared by the lowering (what to submit), the driver
// seam (how it is submitted) and the emulator (what it executes). They mirror
// the rocket uAPI's drm_rocket_task / drm_rocket_job, but own their arrays:
// every job has its own handle lists, so nothing is freed twice (Mesa shares
// one handle allocation between the jobs of a multi-job submit and frees it
// once per job).
#pragma once
#include <cstdint>
#include <vector>

namespace opal::rocket::abi {

struct TaskDesc {
  uint32_t regcmd_iova = 0;   // NPU address of the task's first regcmd entry (16-byte aligned)
  uint32_t regcmd_count = 0;  // entries including the 4-entry tail
};

struct JobDesc {
  std::vector<TaskDesc> tasks;
  std::vector<uint32_t> in_bo_handles;
  std::vector<uint32_t> out_bo_handles;
};

// Hardware constants of one RK3588 NPU core.
inline constexpr unsigned kCbufBanks = 12;
inline constexpr unsigned kCbufBankBytes = 32 * 1024;
inline constexpr unsigned kCbufEntryBytes = 128;
inline constexpr unsigned kCbufEntriesPerBank = kCbufBankBytes / kCbufEntryBytes;  // 256
inline constexpr unsigned kFeatureAtomBytes = 16;                                  // C2 of NC1HWC2 for int8
inline constexpr unsigned kWeightAtomKernels = 32;  // int8 weights: 32 kernels x 32 channels blocks
inline constexpr unsigned kMaxReduction = 8192;     // K per task (kw*kh*C), vendor limit for int8

// CBUF entries (128 B) one input row of `width` pixels and `channels` int8
// channels occupies (NVDLA's rule as Mesa applies it: 8 atoms of 16 channels per
// entry; a remainder of exactly 3 atoms takes a whole entry per pixel).
constexpr unsigned cbuf_entries_per_row(unsigned width, unsigned channels) {
  const unsigned atoms_per_entry = kCbufEntryBytes / kFeatureAtomBytes;
  const unsigned atoms = (channels + kFeatureAtomBytes - 1) / kFeatureAtomBytes;
  const unsigned last = atoms % atoms_per_entry;
  const unsigned whole = (atoms / atoms_per_entry) * width;
  const unsigned frac = last == 3 ? width : (last * width + atoms_per_entry - 1) / atoms_per_entry;
  return whole + frac;
}

}  // namespace opal::rocket::abi
