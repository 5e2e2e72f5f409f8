// A fixed orthogonal rotation of the reduction dimension K, applied to both
// matmul operands before their per-row int8 quantization:
//   X W^T = (X R)(W R)^T   for R orthogonal (R R^T = I),
// with R = block-diagonal (H_B D) / sqrt(B): H_B the Sylvester Hadamard matrix
// of size B (a power of two), D a fixed pseudo-random diagonal of +-1. The
// rotation spreads an outlier channel over the whole block, so the row maximum
// that sets the int8 step is close to the row's RMS * a few, instead of the
// outlier (QuaRot / SpinQuant's observation for W8A8). B is the largest power
// of two dividing the padded K, at most kMaxRotationBlock; cost per row
// K log2 B additions (fast Walsh-Hadamard transform), done on the host.
#pragma once
#include <cstdint>

namespace opal::rocket {

inline constexpr unsigned kMaxRotationBlock = 4096;

// The block size for a padded K (a multiple of 32).
unsigned rotation_block(unsigned k_padded);

// Rotates x[0..n) in place, block by block (n a multiple of block).
void rotate_row(float* x, unsigned n, unsigned block);

}  // namespace opal::rocket
