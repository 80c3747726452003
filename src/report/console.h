// src/report/console.h — the text forms of a report for a terminal; no file I/O.
//
// `lav run` prints the summary table when it ends and a failure message for each failing case;
// `lav show` prints the same from a file.
//
//   report::print_summary_table(std::cout, report, {.color = true});
//   report::print_case_details(std::cout, report);  // every case that is not a plain pass
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "report/report.h"

namespace lav::report {

/// How the console forms print.
struct View {
    /// verdict words in colour: PASS green, WARN yellow, FAIL and ERROR red
    bool color = false;
    /// print_case_details tells the fail and error records alone (lav run --quiet)
    bool failures_only = false;
    /// why an incomplete run ended, said in its totals line: "stopped after the first failure"
    std::string why_incomplete;
};

/// Records by verdict; a verdict other than pass, warn or fail counts as an error.
struct VerdictCounts {
    size_t records = 0, pass = 0, warn = 0, fail = 0, error = 0;
    void add(const std::string& verdict);
};

/// "1 case", "3 cases": a count and its noun, in the plural unless it is one.
std::string plural(size_t n, const char* noun);

/// "<case>/<variant>/<backend>/<pass>" -> "<case>": the records of one case share its prologue.
std::string case_of(const std::string& record_id);

/// Rows aligned in columns (widths in code points; `view` colours the verdict words of column
/// `verdict_column`); the last column is right-aligned when `right_last`.
void print_columns(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                   bool right_last = false, size_t verdict_column = size_t(-1),
                   const View& view = {});

/// "N cases: P passed, W warned, F failed, E errors", ending in "(incomplete run)" unless the run
/// finished (with view.why_incomplete after a colon); where a provider counted time compiling
/// and autotuning its kernels, a second line gives it beside the records' kernel time.
std::string totals_line(const Report& report, const View& view = {});

/// One aligned row per case: id (long ones shortened in the middle), verdict (PASS, WARN, FAIL,
/// ERROR), worst tensor with its rel_rmse and bound (%.2e), seconds; then the totals line.
void print_summary_table(std::ostream& out, const Report& report, const View& view = {});

/// A case that did not simply pass: a header with the verdict, case, shape and dtypes, then one
/// line per finding (a failing measure's finding carries its numbers: rel_rmse and bound, the
/// elements out of bound, the worst one beside its reference). For a case that could not run,
/// or one without findings, its message.
void print_case_failure(std::ostream& out, const CaseRecord& record, const View& view = {});

/// print_case_failure for each record that is not a pass without findings (with
/// view.failures_only, each fail and error), after a blank line; the records of one case with the
/// same verdict, message and findings (a prologue's, an isolated case's crash) are told once.
void print_case_details(std::ostream& out, const Report& report, const View& view = {});

/// The findings of a case, one line each, with the dtype history of the tensor on a second line
/// where the finding has one.
void print_findings(std::ostream& out, const CaseRecord& record);

}  // namespace lav::report
