// src/harness/decompose.h — lav run --decompose: how much of a result's error each storage
// rounding of the kernel's contract accounts for, by rerunning its row with them kept in fp32.
#pragma once

#include <vector>

#include "core/row.h"
#include "harness/family.h"
#include "report/report.h"
#include "scenario/case.h"

namespace lav::harness {

/// Reruns `row` on `call` (the call that gave `measured`'s results, whose rel_rmse are in
/// `metrics`) three more times, keeping one more group of roundings in fp32 each time: the
/// intermediates rounded to the input dtype (the kernel gets the same values as fp32 inputs),
/// then the stored states (fp32 state dtype), then the outputs (fp32 output dtype). What is
/// left is the kernel's fp32 arithmetic. Returns one DECOMPOSITION finding per measured tensor
/// with each group's share of the squared error (cumulative, in that order), or one saying why
/// the row cannot be rerun so.
std::vector<report::Finding> decompose(const scenario::Case& c, const Row& row, const Call& call,
                                       bool backward, const std::vector<MeasuredSpec>& measured,
                                       const TensorMap& gold,
                                       const std::vector<report::MetricRow>& metrics);

}  // namespace lav::harness
