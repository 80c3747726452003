// src/metrics/measures.h — error measures of one result tensor against its float64 reference.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::metrics {

/// The measures of one tensor (reports/SCHEMA.md, `metrics`). rel_rmse and drift are NaN when
/// the result holds a NaN or Inf, so a non-finite result can never pass a bound.
struct Measures {
    double rel_rmse = 0;  ///< ‖x − ref‖₂ / ‖ref‖₂ (0 when both are zero)
    double max_abs = 0;   ///< max |x − ref| over finite elements
    std::vector<int64_t> max_abs_index;  ///< where max_abs occurs
    double worst_value = 0;              ///< x at max_abs_index
    double worst_reference = 0;          ///< ref at max_abs_index
    double max_rel = 0;                  ///< max |x − ref| / max(|ref|, floor)
    int64_t nonfinite = 0;               ///< NaN/Inf in x where ref is finite
    int64_t ref_nonfinite = 0;           ///< NaN/Inf in ref (its inputs held them)
    bool all_nonfinite = false;          ///< no finite value in x: max_abs and max_rel are NaN
    int64_t flushed = 0;  ///< zeros in x where ref is non-zero and below x's dtype's normal range
    int64_t ref_nonzero = 0;         ///< non-zero values in ref
    double largest_flushed = 0;      ///< the largest |ref| among the flushed values
    std::vector<double> drift;       ///< rel_rmse per block of positions along time_dim
    std::vector<double> err2, ref2;  ///< ‖x − ref‖² and ‖ref‖² at each position of time_dim
};

/// Compares `x` (any floating dtype) with `ref` (fp64, same shape). `time_dim` is the
/// sequence axis for the drift curve (-1: none); `block` its block length in positions.
Measures measure(const at::Tensor& x, const at::Tensor& ref, int64_t time_dim, int64_t block);

/// The elements of `x` out of `bound`: |x − ref| > bound · max(|ref|, rms(ref) / 10), NaN/Inf
/// included; the same floor as max_rel's, so a near-zero reference value does not count alone.
int64_t count_beyond(const at::Tensor& x, const at::Tensor& ref, double bound);

}  // namespace lav::metrics
