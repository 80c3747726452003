// src/harness/judge.h — a kernel's result against its fp64 reference: the metric row, the
// findings that explain it, and the verdict of the record.
#pragma once

#include <ATen/core/Tensor.h>

#include <set>
#include <string>

#include "core/precision_contract.h"
#include "harness/family.h"
#include "report/report.h"
#include "scenario/case.h"

namespace lav::harness {

/// A row's `results` as they are measured: on the CPU, time-major ones in head_last order;
/// results the case does not measure are left out.
TensorMap measured_results(const scenario::Case& c, const std::vector<MeasuredSpec>& measured,
                           const TensorMap& results);

/// The kernel inputs holding NaN/Inf, for the NONFINITE findings of the results made from
/// them: "k: 512 NaN/Inf, g: 3 NaN/Inf"; "" when every input is finite.
std::string nonfinite_inputs(const TensorMap& inputs);

/// Measures `x` (the kernel's result `m`, head_last, on the CPU) against `ref` and adds its
/// metric row, drift curve and findings to `r`: TOLERANCE (with the elements out of bound, the
/// worst one beside its reference and where the bound comes from), NONFINITE (saying whether
/// the kernel received non-finite inputs, `bad_inputs`), UNDERFLOW, the dtype contract, DRIFT
/// (a real growth along the sequence that crosses the bound) and CHUNK_BOUNDARY (chunk edges
/// worse than chunk interiors, chunk variants only).
void judge(const scenario::Case& c, const MeasuredSpec& m, const at::Tensor& x,
           const at::Tensor& ref, const PrecisionContract& contract, const std::string& bad_inputs,
           report::CaseRecord& r);

/// The verdict of a record whose kernels ran: "fail" when a measure failed, when
/// `refused_boundary` (a BOUNDARY_MISMATCH under --strict-boundary) or when a finding's kind is
/// in `fail_on`; else "warn" when it carries a dtype finding; else "pass". Sets the message.
void decide(report::CaseRecord& r, bool refused_boundary, const std::set<std::string>& fail_on);

}  // namespace lav::harness
