// src/report/views.h — the views of `lav show` beyond the summary: one case in full, every
// finding of a run grouped by kind, and each family's backends side by side.
//
//   report::print_record(std::cout, record, view);  // metrics, findings, contract
//   report::print_trace(std::cout, record.trace);   // the same in each record of a case
//   report::print_findings_by_kind(std::cout, report);
//   report::print_backends(std::cout, report);
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "report/console.h"
#include "report/report.h"

namespace lav::report {

/// The records `id` names: the one record with that id, else every record of the case or
/// "<case>/<variant>" it names; none when it names nothing.
std::vector<const CaseRecord*> records_named(const Report& report, const std::string& id);

/// One finding as records carry it, with the ids of those records, in report order.
struct FindingGroup {
    Finding finding;
    std::vector<std::string> records;
};

/// Every finding of `report`, in finding_kinds() order and then first appearance; findings of
/// one kind, tensor, message and history are one group.
std::vector<FindingGroup> group_findings(const Report& report);

/// A record in full: print_case_failure's header, its message, the metrics as a table, the
/// findings with their dtype histories, and the precision contract.
void print_record(std::ostream& out, const CaseRecord& record, const View& view);

/// A case's trace as a table: the traced prologue ops, then each kernel's declared items.
void print_trace(std::ostream& out, const std::vector<TraceRow>& trace);

/// Every finding grouped by kind: a heading per kind with its count, then each finding with its
/// dtype history and the records that carry it, grouped by case.
void print_findings_by_kind(std::ostream& out, const Report& report);

/// One family under one backend: its records by verdict, and its worst measure in each pass.
struct BackendSide {
    std::string family, backend;
    VerdictCounts verdicts;
    struct Worst {
        const CaseRecord* record = nullptr;  ///< none where no record of the pass was measured
        const MetricRow* metric = nullptr;
    };
    Worst fwd, bwd;
};

/// Every (family, backend) of `report`, families and their backends in name order. The worst
/// measure is the largest rel_rmse, a NaN above all; an error record counts with the measures
/// it was judged on (a provider that leaves a gradient out).
std::vector<BackendSide> backends_side_by_side(const Report& report);

/// backends_side_by_side as a table: a row per family and backend, its records by verdict, and
/// the worst rel_rmse of its forward and of its backward records with their variant and tensor.
void print_backends(std::ostream& out, const Report& report);

}  // namespace lav::report
