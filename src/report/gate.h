// src/report/gate.h — the numeric gate: a run against a baseline, case by case and measure by
// measure.
//
// Cases are matched by their id ("<scenario>[<matrix>]/<variant>/<backend>/<pass>"), tensors by
// name. A measure regresses when it exceeds both its floor and baseline × (1 + slack); the floor
// keeps noise-level values (an fp32 kernel at 1e-7) from ever counting. A case whose verdict
// went from pass to anything else regresses too, and so does NaN or Inf in a tensor the
// baseline does not have. Neither report is trusted: check_gate_input refuses what the
// comparison cannot stand on.
//
//   check_gate_input(run, "run.h5", false, options);
//   check_gate_input(base, "base.h5", true, options);
//   GateResult g = gate(run, base, options);
//   print_gate(std::cout, g);
//   return g.passed(options) ? 0 : 1;
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "report/report.h"

namespace lav::report {

/// How much a measure may grow before it regresses.
struct Tolerance {
    double slack;  ///< relative: a regression exceeds baseline × (1 + slack)
    double floor;  ///< absolute: values at or below it never regress
};

/// The measures the gate compares, with their defaults (documented in reports/SCHEMA.md):
/// rel_rmse 10 % over 1e-6; max_rel and max_abs 50 % over 1e-4 and 1e-6; nonfinite any increase.
std::map<std::string, Tolerance> default_tolerances();

struct GateOptions {
    std::map<std::string, Tolerance> tolerances = default_tolerances();
    bool allow_missing = false;
    bool allow_incomplete = false;          ///< take a run or baseline that did not finish
    bool allow_nonfinite_baseline = false;  ///< take NaN or Inf measures in the baseline
};

/// Refuses (ReportError, exit 2, naming `file` and the case) a report the gate cannot stand on:
/// an id twice (which copy counts?), a negative measure (none is), `complete = 0` unless
/// allow_incomplete; in a `baseline`, NaN or Inf in a measure too, unless
/// allow_nonfinite_baseline, since no run can exceed such a value.
void check_gate_input(const Report& report, const std::string& file, bool baseline,
                      const GateOptions& options);

/// One measure of one tensor that moved past its tolerance (either way).
struct GateChange {
    std::string case_id;
    std::string tensor;   ///< "" for a verdict change
    std::string measure;  ///< "rel_rmse", ..., or "verdict"
    double baseline = 0;
    double run = 0;
    std::string note;  ///< e.g. "pass -> fail"
};

struct GateResult {
    /// what differs between the baseline's machine and libraries and the run's (lav's own
    /// commit aside; environment_changes, baseline -> run): said first, it may explain the rest
    std::vector<std::string> environment;
    std::vector<GateChange> regressions;
    std::vector<GateChange> improvements;
    std::vector<std::string> missing_in_run;       ///< in the baseline, not run
    std::vector<std::string> missing_in_baseline;  ///< run, not in the baseline
    size_t compared = 0;                           ///< cases found on both sides

    bool passed(const GateOptions& options) const;
};

GateResult gate(const Report& run, const Report& baseline, const GateOptions& options);

/// Regressions, then improvements, then missing cases; ends with a one-line verdict.
void print_gate(std::ostream& out, const GateResult& result, const GateOptions& options);

/// What a baseline keeps of a run: ids, verdicts and the metric rows (no drift, contract,
/// findings or trace), so that a committed baseline stays small.
Report make_baseline(const Report& run);

}  // namespace lav::report
