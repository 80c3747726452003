// src/harness/equivalence.h — how a case's kernels agree with each other beside their errors
// against the reference: variant with variant, head_first with head_last, a varlen batch with
// its sequences run alone (a SEGMENT_LEAK where a sequence depends on its neighbours).
#pragma once

#include <vector>

#include "core/row.h"
#include "harness/family.h"
#include "report/report.h"
#include "scenario/case.h"

namespace lav::harness {

/// One record of a case whose kernel ran, with what it ran on and what it returned.
struct Ran {
    size_t record;  ///< its index in the case's records
    const Row* row;
    Call call;
    bool backward;
    TensorMap results;  ///< measured results, head_last, on the CPU
};

/// Adds an EQUIVALENCE finding to each record of `ran`: the relative difference (‖a − b‖ over
/// the reference's norm, or "bitwise") of its results to those of the case's other variants on
/// the same backend and pass; with `reruns`, also to its own row rerun in the other layout and,
/// for a varlen case, to each sequence run alone, with each sequence's rel_rmse against the
/// reference. A sequence whose result differs from its run alone by more than half the
/// tensor's bound adds a SEGMENT_LEAK.
void add_equivalence(const scenario::Case& c, const Family& family,
                     const std::vector<MeasuredSpec>& fwd, const std::vector<MeasuredSpec>& bwd,
                     const TensorMap& gold, const std::vector<Ran>& ran, bool reruns,
                     std::vector<report::CaseRecord>& records);

}  // namespace lav::harness
