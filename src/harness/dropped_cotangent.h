// src/harness/dropped_cotangent.h — a failed backward explained by a cotangent its kernel
// leaves out: the gradients agree with the fp64 reference computed without it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/row.h"
#include "report/report.h"
#include "scenario/case.h"

namespace lav::harness {

/// For a backward record whose gradients failed their bounds (`metrics`, measured from
/// `results`): each of the case's `cotangents` (when it has two or more) that, zeroed in the
/// fp64 reference, brings every failed gradient within its bound. `reference_without(name)`
/// gives the reference's gradients with that cotangent zeroed (the caller keeps them per case,
/// on the CPU). One DROPPED_COTANGENT finding per such cotangent: the fault of a backward that
/// never reads it, as FLA 0.6.0's fused_recurrent_rwkv6 never reads dht.
std::vector<report::Finding> dropped_cotangents(
    const scenario::Case& c, const std::vector<std::string>& cotangents, const TensorMap& results,
    const std::vector<report::MetricRow>& metrics,
    const std::function<const TensorMap&(const std::string&)>& reference_without);

}  // namespace lav::harness
