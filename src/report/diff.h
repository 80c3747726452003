// src/report/diff.h — two runs side by side: environment first, then the largest changes.
#pragma once

#include <cstddef>
#include <ostream>

#include "report/report.h"

namespace lav::report {

/// Prints the environment fields that differ (lav version and commit, LibTorch, HDF5, device),
/// the records whose verdict changed, then every (record, tensor) found in both runs whose
/// rel_rmse changed, sorted by the size of the change (|log(b / a)|, largest first; at most `top`
/// rows, 0 for all), then the records found on one side. Two runs that differ in none of these
/// are "no differences", in one line.
void print_diff(std::ostream& out, const Report& a, const Report& b, size_t top);

}  // namespace lav::report
