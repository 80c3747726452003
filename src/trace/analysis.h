// src/trace/analysis.h — findings, dtype histories and the table from a Trace; records nothing.
//
// Findings use reports/SCHEMA.md's kinds; the harness turns them into report findings and
// prints their history. Analyses look at depth-0 ops (the ops the traced code called), and
// follow producers through ops of any depth.
//
//   trace::Trace t = scope.stop();
//   for (const auto& f : trace::find_promotions(t, at::kHalf)) ...
//   // f.message: "k: fp16 -> fp32 at aten::addcmul, operand k_a: fp32 (parameter)"
//   // f.history: "k: fp16 —aten::mul→ fp16 —aten::addcmul(k_a: fp32)→ fp32"
//
// A dtype history follows a tensor's producers back to the first labelled tensor, tensor made
// outside the trace ("external") or factory op ("aten::zeros"), along each op's main operand:
// the source of aten::copy_, else the first floating tensor input, else the first tensor
// input. A step names the other operands whose dtype differs from the main operand's, and
// says [autocast] when autocast was on for the op. Histories longer than 12 steps fold runs
// of unremarkable steps (same dtype in and out, no such operand, no autocast) into
// "—(N ops)→".
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "trace/tracer.h"

namespace lav::trace {

/// One finding about a traced op.
struct Finding {
    std::string kind;     ///< "PROMOTION" or "DEMOTION"
    std::string tensor;   ///< the tensor it is about: its label, else "#<seq>" or "external"
    std::string message;  ///< one line, e.g. "k: fp16 -> fp32 at aten::addcmul, operand ..."
    std::string history;  ///< the dtype history of the tensor the finding points at
    int64_t seq = -1;     ///< the op it points at (the root op; for DEMOTION the cast)
};

/// PROMOTION findings, one per root op. A depth-0 op promotes when one of its floating
/// outputs is wider (more bytes) than `compute` while one of its floating inputs is at most as
/// wide. Its root is the op where the wide dtype entered: following wide inputs back, the
/// earliest promoting op reached, or the op itself when none of its wide inputs came from
/// one. The message names the root op and the operand that caused it: the first input of the
/// output's wide dtype (with its label and role), "explicit cast" for casts, and
/// "under autocast" when autocast was on. Throws ShapeError unless `compute` is floating.
std::vector<Finding> find_promotions(const Trace& trace, c10::ScalarType compute);

/// DEMOTION findings, one per narrowing cast. What counts, exactly:
/// 1. a depth-0 cast — aten::to, aten::_to_copy, aten::type_as, or aten::copy_ into a buffer —
///    whose source is a state (labelled with Role::state, or with a name in `state_labels`)
///    and whose output is a floating dtype of fewer bytes than the source's;
/// 2. then a later depth-0 op accumulates into the narrowed value: it is the self operand of
///    add, sub, addcmul, addcdiv, addmm, addbmm, baddbmm, addmv, addr, lerp, index_add or
///    scatter_add (in-place forms included), or either operand of out-of-place add and sub,
///    or the self of any other in-place op that changes values (not copy_, fill_ and zero_,
///    which overwrite it, nor metadata ops such as unsqueeze_ or detach_).
/// The narrowed value is the cast's output, followed through views, in-place metadata ops,
/// further casts and elementwise scaling (mul, div, neg, clone, contiguous) that keep its
/// shape and take it as their main operand; an overwrite by copy_, fill_ or zero_ ends it.
/// Ops that only read it (bmm(q, h), matmul) neither report nor carry it.
std::vector<Finding> find_demotions(const Trace& trace,
                                    const std::set<std::string>& state_labels = {});

/// Where NaN or Inf first appeared, from a trace of a scope that checks values: the first
/// depth-0 op whose output holds one while its inputs held none. OVERFLOW when a fp16 or bf16
/// output holds ±Inf (finite values beyond the dtype's range), NONFINITE otherwise (0/0, log of
/// a negative, ...); or, when the first op to hold one received it, NONFINITE naming the
/// tensor that entered the trace with it. Empty when no op held NaN or Inf.
std::vector<Finding> find_nonfinite_origin(const Trace& trace);

/// The dtype history of `tensor` (see above); "<label or external>: <dtype>" when no op of
/// the trace produced it.
std::string history(const Trace& trace, const at::Tensor& tensor);

/// The dtype history of output `output` of op `seq`.
std::string history_of_seq(const Trace& trace, int64_t seq, int output = 0);

/// What a tensor is called in histories and findings: its label (given before or after the
/// use), else its producer and the source place of it ("aten::sin at rotary.py:12") where the
/// trace knows one, else "#<producer seq>", else "external".
std::string tensor_name(const Trace& trace, const TensorInfo& info);

/// The seqs of the ops (any depth) with a floating input or output of a dtype other than
/// `only`, in order; empty when the traced code stayed in `only` (e.g. the fp64 reference).
std::vector<int64_t> ops_outside_dtype(const Trace& trace, c10::ScalarType only);

/// One op as strings and ints, for the report's trace table.
struct TraceRow {
    int64_t seq = 0;
    std::string op;       ///< "aten::addcmul"
    std::string site;     ///< where the traced code called it ("rwkv7.py:117"), "" when unknown
    int depth = 0;        ///< 0 for ops the traced code called
    int autocast = 0;     ///< 1 when autocast was on for the op's device
    std::string inputs;   ///< "; "-joined, e.g. "bf16[2,64,4,16] <- #3 (k)" or "fp32[4] (k_a)"
    std::string outputs;  ///< "; "-joined, e.g. "fp32[2,64,4,16]", "... in-place", "... view"
};

/// The trace as a flat table, one row per op in seq order.
std::vector<TraceRow> trace_table(const Trace& trace);

}  // namespace lav::trace
