// src/report/export.h — `lav show --format json|csv`: a report's summary, records and findings
// for other programs. JSON is one document; CSV has a header row; both escape what they carry.
//
//   report::write_json_summary(std::cout, "run.h5", report);
//   report::write_csv_findings(std::cout, report);
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "report/report.h"

namespace lav::report {

/// `text` as a JSON string, quoted: ", \ and control characters escaped (\n, \u001b, ...).
std::string json_string(const std::string& text);

/// `text` as a CSV field: quoted, with quotes doubled, when it holds a comma, a quote or a line
/// break; as it is otherwise.
std::string csv_field(const std::string& text);

/// {"file", "complete", "run": {...}, "totals": {...}, "records": [{id, verdict, worst,
/// rel_rmse, bound, seconds}]}; a number that is not finite is null.
void write_json_summary(std::ostream& out, const std::string& file, const Report& report);
/// id,verdict,worst,rel_rmse,bound,seconds: a row per record.
void write_csv_summary(std::ostream& out, const Report& report);

/// {"records": [...]}: each record with every field, its metrics, findings, contract and trace.
void write_json_records(std::ostream& out, const std::vector<const CaseRecord*>& records);
/// A row per metric of each record (one with empty metric columns for a record without any).
void write_csv_records(std::ostream& out, const std::vector<const CaseRecord*>& records);

/// {"findings": [{kind, tensor, message, history, records: [ids]}]}, grouped as
/// group_findings() does.
void write_json_findings(std::ostream& out, const Report& report);
/// kind,tensor,message,history,record: a row per finding and record that carries it.
void write_csv_findings(std::ostream& out, const Report& report);

/// {"backends": [{family, backend, records, pass, warn, fail, error, worst_fwd, worst_bwd}]}
/// as backends_side_by_side() has them; a worst is {record, variant, tensor, rel_rmse} or null.
void write_json_backends(std::ostream& out, const Report& report);
/// family,backend,records,pass,warn,fail,error, then record,tensor,rel_rmse of the worst forward
/// and of the worst backward measure (empty where there is none): a row per family and backend.
void write_csv_backends(std::ostream& out, const Report& report);

}  // namespace lav::report
