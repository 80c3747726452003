// src/report/console.h — the text forms of a report for a terminal; no colours, no file I/O.
//
// `lav run` prints the summary table when it ends and a failure message for each failing case;
// `lav show` prints the same from a file.
//
//   report::print_summary_table(std::cout, report);
//   for (const auto& c : report.cases)
//       if (c.verdict != "pass") report::print_case_failure(std::cout, c);
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "report/report.h"

namespace lav::report {

/// "1 case", "3 cases": a count and its noun, in the plural unless it is one.
std::string plural(size_t n, const char* noun);

/// One aligned row per case: id (long ones shortened in the middle), verdict (PASS, FAIL,
/// ERROR), worst tensor with its rel_rmse and bound (%.2e), seconds; then the totals line
/// "N cases: P passed, F failed, E errors", which ends in "(incomplete run)" unless the run
/// finished.
void print_summary_table(std::ostream& out, const Report& report);

/// A failing case in the style of PyTorch's mismatch message: a header with the case, shape and
/// dtypes, one line per failing tensor (rel_rmse against its bound, max |Δ| and where, nonfinite
/// count), then the findings. For a case that could not run, its message.
void print_case_failure(std::ostream& out, const CaseRecord& record);

/// The findings of a case, one line each, with the dtype history of the tensor on a second line
/// where the finding has one.
void print_findings(std::ostream& out, const CaseRecord& record);

}  // namespace lav::report
