// Splitting one convolution into NPU tasks that fit the on-chip CBUF
// (12 banks x 32 KiB per core), and grouping the tasks into jobs.
//
// Policy::Mesa reproduces Mesa's rkt_split_tasks exactly: weights get
// ceil(bytes/32 KiB)+1 banks; if that leaves at least 2 banks the weights are
// "resident" (one job, tasks after the first set WEIGHT_REUSE), otherwise the
// split is 7 data + 5 weight banks with one job per task. Only the input rows
// (Mesa's "height", dims[2]) are split, with halo rows for kernels > 1; the
// output channels and K are never split, so one task may be programmed with
// weights far larger than its weight banks (e.g. 16 MiB for M16 K4096 N4096).
//
// Policy::Opal keeps Mesa's split whenever Mesa's weights are resident, and
// otherwise also splits the output channels (N) into tiles of 32k kernels whose
// weights fit the tile's weight banks, so every task's weights are resident.
// Tasks are ordered N tile by N tile (row tiles inside), each job holds at most
// kMaxTasksPerJob tasks, and WEIGHT_REUSE is set only on a task whose
// predecessor in the same job loaded the same weights.
#pragma once
#include <vector>

#include "backends/rocket/op/conv_op.h"

namespace opal::rocket {

enum class Policy { Mesa, Opal };

inline constexpr unsigned kMaxTasksPerJob = 32;

struct TaskTile {
  // Input rows [top_row, bottom_row] of the full tensor and the padding of this task.
  unsigned top_row = 0, bottom_row = 0;
  unsigned in_height = 0;
  unsigned pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  unsigned overlap_rows = 0, retain_rows = 0;
  unsigned out_row = 0;  // first output row written by this task
  unsigned out_width = 0, out_height = 0;
  // Output channels [first_kernel, first_kernel + kernels).
  unsigned first_kernel = 0, kernels = 0;
  unsigned data_banks = 0, weight_banks = 0;
  bool weight_reuse = false;
  unsigned job = 0;
  unsigned input_offset = 0;   // bytes into the input BO (row offset only)
  unsigned output_offset = 0;  // bytes into the output BO (row offset + channel-surface offset)
};

struct TilePlan {
  Policy policy = Policy::Mesa;
  bool weights_resident = false;  // Mesa's reuse_weights_cbuf
  std::vector<TaskTile> tasks;
  std::vector<std::vector<unsigned>> jobs;  // task indices per job, in submission order
};

// Weight banks Mesa budgets for `kernels` kernels (includes Mesa's extra bank).
unsigned cbuf_weight_banks(const ConvOp& op, unsigned kernels);

TilePlan plan_tiles(const ConvOp& op, Policy policy);

}  // namespace opal::rocket
