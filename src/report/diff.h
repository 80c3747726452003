// src/report/diff.h — two runs side by side: environment first, then the largest changes.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "report/report.h"

namespace lav::report {

/// What a run ran on and with, machine first, in the order `lav diff` and `lav gate` show it:
/// (name, value) for the GPU, its compute capability, the CUDA driver and runtime, the CPU,
/// LibTorch, the providers, HDF5, lav and its commit.
std::vector<std::pair<std::string, std::string>> environment_of(const RunInfo& run);

/// "name: A  ->  B" for each entry of environment_of that differs between `a` and `b`; without
/// lav's own version and commit unless `with_lav`.
std::vector<std::string> environment_changes(const RunInfo& a, const RunInfo& b, bool with_lav);

/// Prints the environment fields that differ (environment_changes),
/// the records whose verdict changed, then every (record, tensor) found in both runs whose
/// rel_rmse changed, sorted by the size of the change (|log(b / a)|, largest first; at most `top`
/// rows, 0 for all), then the records found on one side. Two runs that differ in none of these
/// are "no differences", in one line.
void print_diff(std::ostream& out, const Report& a, const Report& b, size_t top);

}  // namespace lav::report
