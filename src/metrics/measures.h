// src/metrics/measures.h — error measures of one result tensor against its float64 reference.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lav::metrics {

/// The measures of one tensor (reports/SCHEMA.md, `metrics`). rel_rmse and drift are NaN when
/// the result holds a NaN or Inf, so a non-finite result can never pass a bound.
struct Measures {
    double rel_rmse = 0;                 ///< ‖x − ref‖₂ / ‖ref‖₂ (0 when both are zero)
    double max_abs = 0;                  ///< max |x − ref| over finite elements
    std::vector<int64_t> max_abs_index;  ///< where max_abs occurs
    double max_rel = 0;                  ///< max |x − ref| / max(|ref|, floor)
    int64_t nonfinite = 0;               ///< NaN/Inf in x where ref is finite
    std::vector<double> drift;           ///< rel_rmse per block of positions along time_dim
};

/// Compares `x` (any floating dtype) with `ref` (fp64, same shape). `time_dim` is the
/// sequence axis for the drift curve (-1: none); `block` its block length in positions.
Measures measure(const at::Tensor& x, const at::Tensor& ref, int64_t time_dim, int64_t block);

}  // namespace lav::metrics
