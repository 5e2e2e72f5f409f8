// Task tiling (see tiling.h). The row split follows NVDLA's scheme as Mesa
// implements it: the first task covers as many input rows as the data banks
// hold; each next task starts kernel_height - stride rows before the previous
// task's last row so its first output row follows the previous task's last
// one; the last task takes the bottom padding.
#include "backends/rocket/lower/tiling.h"

#include <algorithm>

#include "backends/rocket/abi/job.h"
#include "core/error.h"

namespace opal::rocket {
namespace {

using abi::kCbufBanks;
using abi::kCbufEntriesPerBank;

struct RowSplitInput {
  unsigned data_banks_available = 0;
  unsigned weight_banks_available = 0;
};

// Mesa's height split for one set of kernels. Returns tasks with rows,
// padding, output sizes and offsets filled in (offsets relative to the row
// origin; channel offsets are added by the caller).
std::vector<TaskTile> split_rows(const ConvOp& op, const RowSplitInput& in) {
  const Padding pad = explicit_padding(op);
  const unsigned per_row = abi::cbuf_entries_per_row(op.in_width, op.in_channels);
  const unsigned needed_banks = div_up(per_row * op.in_height, kCbufEntriesPerBank);
  std::vector<TaskTile> tasks;

  if (needed_banks <= in.data_banks_available) {
    TaskTile t;
    t.top_row = 0;
    t.bottom_row = op.in_height - 1;
    t.in_height = op.in_height;
    t.pad_top = pad.top;
    t.pad_bottom = pad.bottom;
    t.pad_left = pad.left;
    t.pad_right = pad.right;
    t.out_width = op.out_width;
    t.out_height = op.out_height;
    t.data_banks = needed_banks;
    t.weight_banks = kCbufBanks - needed_banks;
    tasks.push_back(t);
    return tasks;
  }

  const unsigned rows_per_task = kCbufEntriesPerBank * in.data_banks_available / per_row;
  if (rows_per_task < op.kernel_height)
    fail("rocket: {} data banks hold {} input rows of {} entries, fewer than the kernel height {}",
         in.data_banks_available, rows_per_task, per_row, op.kernel_height);
  const unsigned kh = op.kernel_height, s = op.stride;

  TaskTile first;
  first.top_row = 0;
  first.bottom_row = rows_per_task - 1;
  first.pad_top = pad.top;
  first.pad_left = pad.left;
  first.pad_right = pad.right;
  tasks.push_back(first);

  // The row of the kernel's last tap for the first output row.
  unsigned row = kh - pad.top - 1;
  while (row < op.in_height) {
    const TaskTile& prev = tasks.back();
    while (row <= prev.bottom_row) row += s;
    if (row > prev.bottom_row) row -= s;
    TaskTile t;
    t.top_row = std::min(row, prev.bottom_row) - (kh - 1) + s;
    t.bottom_row = t.top_row + rows_per_task - 1;
    t.pad_left = pad.left;
    t.pad_right = pad.right;
    if (t.bottom_row >= op.in_height - 1) {
      t.bottom_row = op.in_height - 1;
      t.pad_bottom = pad.bottom;
      tasks.push_back(t);
      break;
    }
    row = t.top_row + kh - 1;
    tasks.push_back(t);
  }
  if (tasks.back().top_row >= op.in_height || tasks.back().bottom_row >= op.in_height + pad.bottom) tasks.pop_back();

  for (size_t i = 1; i < tasks.size(); i++) {
    TaskTile& prev = tasks[i - 1];
    TaskTile& cur = tasks[i];
    const unsigned overlap = prev.bottom_row >= cur.top_row ? prev.bottom_row - cur.top_row + 1 : 0;
    cur.overlap_rows = overlap;
    prev.retain_rows = overlap;
  }

  unsigned out_rows_done = 0;
  for (TaskTile& t : tasks) {
    t.bottom_row = std::min(t.bottom_row, op.in_height - 1);
    t.in_height = t.bottom_row - t.top_row + 1;
    t.out_width = (op.in_width + t.pad_left + t.pad_right - op.kernel_width) / s + 1;
    t.out_height = (t.in_height + t.pad_top + t.pad_bottom - kh) / s + 1;
    t.out_row = out_rows_done;
    t.data_banks = in.data_banks_available;
    t.weight_banks = in.weight_banks_available;
    out_rows_done += t.out_height;
  }
  return tasks;
}

void set_offsets(const ConvOp& op, TaskTile& t) {
  const unsigned atom = abi::kFeatureAtomBytes;
  t.input_offset = op.in_width * atom * t.top_row;
  // Channel surfaces of 16 int8 (or 4 int32) channels, each out_width * out_height atoms.
  const unsigned channels_per_atom = op.int32_output ? atom / 4 : atom;
  const unsigned surface_bytes = op.out_width * op.out_height * atom;
  t.output_offset = op.out_width * atom * t.out_row + (t.first_kernel / channels_per_atom) * surface_bytes;
}

}  // namespace

unsigned cbuf_weight_banks(const ConvOp& op, unsigned kernels) {
  const uint64_t bytes = uint64_t(op.taps()) * op.in_channels * kernels;
  const uint64_t entries = (bytes + abi::kCbufEntryBytes - 1) / abi::kCbufEntryBytes;
  return unsigned((entries + kCbufEntriesPerBank - 1) / kCbufEntriesPerBank) + 1;  // Mesa's extra bank
}

TilePlan plan_tiles(const ConvOp& op, Policy policy) {
  op.validate();
  TilePlan plan;
  plan.policy = policy;
  const unsigned wanted_w = cbuf_weight_banks(op, op.out_channels);
  plan.weights_resident = wanted_w + 1 < kCbufBanks;

  if (policy == Policy::Mesa || plan.weights_resident) {
    RowSplitInput in;
    if (plan.weights_resident) {
      in.weight_banks_available = wanted_w;
      in.data_banks_available = kCbufBanks - wanted_w;
    } else {
      in.data_banks_available = 7;
      in.weight_banks_available = kCbufBanks - 7;
    }
    plan.tasks = split_rows(op, in);
    for (size_t i = 0; i < plan.tasks.size(); i++) {
      TaskTile& t = plan.tasks[i];
      t.first_kernel = 0;
      t.kernels = op.out_channels;
      t.weight_reuse = plan.weights_resident && i > 0;
      set_offsets(op, t);
    }
    if (plan.weights_resident) {
      // Mesa: one job with every task (the tasks share the core and its CBUF).
      // Opal: the same, capped at kMaxTasksPerJob tasks per job.
      std::vector<unsigned> job;
      for (unsigned i = 0; i < plan.tasks.size(); i++) {
        if (policy == Policy::Opal && job.size() == kMaxTasksPerJob) {
          plan.jobs.push_back(job);
          job.clear();
          plan.tasks[i].weight_reuse = false;
        }
        plan.tasks[i].job = unsigned(plan.jobs.size());
        job.push_back(i);
      }
      plan.jobs.push_back(job);
    } else {
      for (unsigned i = 0; i < plan.tasks.size(); i++) {
        plan.tasks[i].job = i;
        plan.jobs.push_back({i});
      }
    }
    return plan;
  }

  // Opal, weights not resident: tile N so that each tile's weights are.
  const unsigned per_row = abi::cbuf_entries_per_row(op.in_width, op.in_channels);
  const unsigned data_full = div_up(per_row * op.in_height, kCbufEntriesPerBank);
  const unsigned data_wanted = std::max(1u, std::min(data_full, 4u));
  unsigned n_tile = 0;
  for (unsigned n = 32; n < op.out_channels; n += 32)
    if (cbuf_weight_banks(op, n) + data_wanted <= kCbufBanks) n_tile = n;
  if (n_tile == 0) {
    n_tile = 32;
    if (cbuf_weight_banks(op, n_tile) >= kCbufBanks)
      fail("rocket: 32 kernels of {} bytes do not fit the CBUF next to one data bank", op.taps() * op.in_channels);
  }
  const unsigned w_banks = cbuf_weight_banks(op, n_tile);
  RowSplitInput in;
  in.weight_banks_available = w_banks;
  in.data_banks_available = kCbufBanks - w_banks;
  const std::vector<TaskTile> rows = split_rows(op, in);

  std::vector<unsigned> job;
  for (unsigned n0 = 0; n0 < op.out_channels; n0 += n_tile) {
    const unsigned kernels = std::min(n_tile, op.out_channels - n0);
    for (size_t r = 0; r < rows.size(); r++) {
      TaskTile t = rows[r];
      t.first_kernel = n0;
      t.kernels = kernels;
      if (rows.size() == 1) {  // the whole input fits: same banks for every N tile
        t.data_banks = kCbufBanks - w_banks;
        t.weight_banks = w_banks;
      }
      set_offsets(op, t);
      if (job.size() == kMaxTasksPerJob) {
        plan.jobs.push_back(job);
        job.clear();
      }
      t.weight_reuse = r > 0 && !job.empty();
      t.job = unsigned(plan.jobs.size());
      job.push_back(unsigned(plan.tasks.size()));
      plan.tasks.push_back(t);
    }
  }
  plan.jobs.push_back(job);
  return plan;
}

}  // namespace opal::rocket
