// src/metrics/drift.h — how an error curve along the sequence grows, and whether chunk edges
// are worse than chunk interiors; plain numbers in, plain numbers out.
#pragma once

#include <cstdint>
#include <vector>

namespace lav::metrics {

/// The least-squares growth of a per-block error curve (block b covers positions
/// [b·block, (b+1)·block)), in rel_rmse per 1,000 positions, with its standard error.
struct Growth {
    double per_1000 = 0;
    double stderr_per_1000 = 0;
    /// The growth is real: the slope's lower 2σ bound is above zero over the whole curve and
    /// over its later half (a curve that settles after a warm-up does not grow), and the rise
    /// it predicts over the curve is at least a tenth of the curve's mean. Needs 6 blocks.
    bool real = false;
};

/// Undefined (all zero) for a curve with a non-finite block or fewer than 6 blocks.
Growth fit_growth(const std::vector<double>& curve, int64_t block);

/// Chunk-edge positions (the first and last position of each chunk) against the interior ones.
struct EdgeContrast {
    double ratio = 0;  ///< rel_rmse at edges / rel_rmse inside chunks (geometric mean over chunks)
    double z = 0;      ///< mean log-ratio over its standard error
    /// edges are worse beyond noise: ratio ≥ 2 and z ≥ 4, over at least 8 chunks
    bool spike = false;
};

/// `err2[t]` and `ref2[t]` are ‖x − ref‖² and ‖ref‖² at position t; `offset[t]` is t's position
/// in its chunk (0 for the first) and `length[t]` that chunk's length.
EdgeContrast edge_contrast(const std::vector<double>& err2, const std::vector<double>& ref2,
                           const std::vector<int64_t>& offset, const std::vector<int64_t>& length);

}  // namespace lav::metrics
