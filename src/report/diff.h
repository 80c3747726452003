// src/report/diff.h — two runs side by side: environment first, then the largest changes.
#pragma once

#include <cstddef>
#include <ostream>

#include "report/report.h"

namespace lav::report {

/// Prints the environment fields that differ (lav version and commit, LibTorch, HDF5, device),
/// then every (case, tensor) found in both runs sorted by the size of its rel_rmse change
/// (|log(b / a)|, largest first; at most `top` rows, 0 for all), then the cases found on one side.
void print_diff(std::ostream& out, const Report& a, const Report& b, size_t top);

}  // namespace lav::report
