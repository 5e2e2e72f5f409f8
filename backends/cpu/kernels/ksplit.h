// The k-split of long rows in the row-group decode kernels (stop 30): a run
// of groups whose 8 rows' weights and activation row exceed ksplit_budget()
// bytes is read a part of k at a time (that part of every group of the run,
// then the next part, the same accumulators continued: the same bits), so
// that the activation's part stays in L1d between groups.
#pragma once

#include <cstdint>

namespace opal::cpu {

// Default 5/6 of the L1d (40 KiB at 48 KiB: Llama-3.2-1B's FFN down, k =
// 8192, in 2 parts; rows of k <= 4096 whole); $OPAL_KSPLIT_BUDGET (bytes;
// "off" = never split) overrides the default, and set_ksplit_budget (bytes;
// 0: back to the default) overrides both (tests, benchmarks).
int64_t ksplit_budget();
void set_ksplit_budget(int64_t bytes);
// The parts of k for groups of group_bytes of weights against act_bytes of activation row, nb blocks a row: 1 =
// unsplit, else ceil((group_bytes + act_bytes) / budget), at most nb.
int64_t ksplit_parts(int64_t group_bytes, int64_t act_bytes, int64_t nb);

}  // namespace opal::cpu
