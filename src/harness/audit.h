// src/harness/audit.h — a case's prologue run under the dtype tracer, and the kernel-boundary
// check.
//
// With a [prologue], the kernel inputs are what the user's op sequence makes of the generated
// tensors. The ops run under a TraceScope; the trace gives PROMOTION and DEMOTION findings, and
// each kernel input that differs from what the case declares (the dtypes, head_last shapes and
// unit-stride rows the kernel's contract is built for, and int32/int64 cu_seqlens with the
// case's offsets) is a BOUNDARY_MISMATCH carrying that tensor's dtype history. The kernel then
// gets the inputs made to match the declaration — cast, transposed back from head_first,
// copied contiguous, the case's cu_seqlens — the fix the user most likely wants, so the case
// still measures the kernel; with `strict` a mismatch fails the case. A shape that no such fix
// explains leaves nothing to run: the case fails with the finding.
#pragma once

#include <string>
#include <vector>

#include "harness/inputs.h"
#include "harness/prologue.h"
#include "report/report.h"

namespace lav::harness {

struct Audit {
    std::vector<report::Finding> findings;
    std::vector<report::TraceRow> trace;
    bool boundary_mismatch = false;
    /// why the kernel cannot run on what the prologue made; empty when it can
    std::string refusal;
};

/// Runs the prologue of `c` on `generated` (from make_tensors over `specs`) and returns the
/// kernel inputs it produced, cast to the declared dtypes, in both forms (kernel and fp64
/// reference). Fills `audit`; when it sets `audit.refusal`, the returned tensors are incomplete.
/// A prologue that fails throws ScenarioError naming the statement. A Python prologue runs
/// through `python`, its module's parameters and buffers labelled by qualified name, and each
/// op with the user's source place. Its tensors live on `device`, the case's, and on the GPU
/// under fp16 (CUDA) autocast.
CaseTensors run_prologue_audited(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                                 const CaseTensors& generated, Audit& audit,
                                 const PythonRunner& python = {}, at::DeviceType device = at::kCPU);

/// The inputs of a case that replays a capture (`[inputs] from`), values bit for bit, each
/// through the boundary check (a captured k in fp32 where the case's inputs are bf16 is a
/// BOUNDARY_MISMATCH, measured cast). Throws ShapeError naming a tensor the capture lacks.
CaseTensors captured_inputs(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                            Audit& audit);

/// `tensors` with each one the capture holds under the same name replaced by it (cotangents).
void take_captured(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                   CaseTensors& tensors);

}  // namespace lav::harness
