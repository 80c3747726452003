// src/report/layout.h — the pieces of a report's HDF5 layout (reports/SCHEMA.md), shared by the
// one-shot write_report and ReportWriter, which appends case by case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "report/h5.h"
#include "report/report.h"

namespace lav::report::layout {

/// The root attributes (the run, `complete`, `case_count` from `report.cases`) and /scenarios.
void write_run(const h5::File& file, const Report& report);

/// Which record's rows of /trace and of /contract hold each record's: its own, or those of the
/// first earlier record with the same trace (the records of one case share theirs) or the same
/// contract items (every record of one kernel). The `trace_case` and `contract_case` columns.
class Sharing {
  public:
    /// Decides for the records of `cases` after those it has seen (`cases` only grows).
    void extend(const std::vector<CaseRecord>& cases);
    int64_t trace_of(size_t index) const { return trace_of_[index]; }
    int64_t contract_of(size_t index) const { return contract_of_[index]; }

  private:
    std::vector<int64_t> trace_of_, contract_of_;
    // content hash -> the records that own rows with that hash
    std::unordered_multimap<size_t, size_t> traces_, contracts_;
};

/// The run-wide tables of a report, open for appending: one row per case in /summary and
/// /cases, rows keyed by a `case` column in the others.
struct Tables {
    h5::Dataset summary, cases, metrics, contract, findings, trace, drift;
};

/// Creates every table empty (chunked, with no limit on their rows).
Tables create_tables(const h5::File& file);

/// Appends the rows of cases [begin, end) of `cases` to every table; `sharing` has seen them.
void append_cases(const Tables& tables, const std::vector<CaseRecord>& cases,
                  const Sharing& sharing, size_t begin, size_t end);

}  // namespace lav::report::layout
