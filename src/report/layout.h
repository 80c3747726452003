// src/report/layout.h — the pieces of a report's HDF5 layout (reports/SCHEMA.md), shared by the
// one-shot write_report and ReportWriter, which appends case by case.
#pragma once

#include <cstddef>
#include <vector>

#include "report/h5.h"
#include "report/report.h"

namespace lav::report::layout {

/// The root attributes: the run, `complete` and `case_count` (the number of `report.cases`).
void write_run(const h5::File& file, const Report& report);

/// The /summary rows of cases [begin, end) of `cases`; its columns in schema order. A column
/// added here is added to every report, written at once or case by case.
h5::Table summary_rows(const std::vector<CaseRecord>& cases, size_t begin, size_t end);

/// The group /cases/<index> with the case's attributes, tables and drift curves.
void write_case(const h5::Group& cases, size_t index, const CaseRecord& record);

}  // namespace lav::report::layout
