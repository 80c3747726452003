// src/harness/audit.h — a case's prologue run under the dtype tracer, and the kernel-boundary
// check.
//
// With a [prologue], the kernel inputs are what the user's op sequence makes of the generated
// tensors. The ops run under a TraceScope; the trace gives PROMOTION and DEMOTION findings, and
// each kernel input whose dtype differs from what the case declares (the dtypes the kernel's
// contract is built for) is a BOUNDARY_MISMATCH carrying that tensor's dtype history. The
// kernel then gets the inputs cast to the declared dtypes — the cast the user most likely
// wants — so the case still measures the kernel; with `strict` a mismatch fails the case.
#pragma once

#include <vector>

#include "harness/inputs.h"
#include "report/report.h"

namespace lav::harness {

struct Audit {
    std::vector<report::Finding> findings;
    std::vector<report::TraceRow> trace;
    bool boundary_mismatch = false;
};

/// Runs the prologue of `c` on `generated` (from make_tensors over `specs`) and returns the
/// kernel inputs it produced, cast to the declared dtypes, in both forms (kernel and fp64
/// reference). Fills `audit`. A prologue that fails, or produces a tensor of the wrong shape,
/// throws ScenarioError or ShapeError naming the statement or the tensor.
CaseTensors run_prologue_audited(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                                 const CaseTensors& generated, Audit& audit);

}  // namespace lav::harness
