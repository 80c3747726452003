// src/cli/show.cpp — `lav show`: a report's summary, one case in full, every finding, or the
// backends side by side, as a console table, JSON or CSV.
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "report/console.h"
#include "report/export.h"
#include "report/report.h"
#include "report/views.h"

namespace lav::cli {
namespace {

void show_summary(const std::string& file, const report::Report& r, const std::string& format,
                  const report::View& view) {
    if (format == "json") return report::write_json_summary(std::cout, file, r);
    if (format == "csv") return report::write_csv_summary(std::cout, r);
    std::cout << file << ": " << r.run.command_line << "\n"
              << "lav " << r.run.lav_version << " (" << r.run.git_commit << "), LibTorch "
              << r.run.torch_version << ", " << r.run.device << ", " << r.run.started_at << "\n\n";
    report::print_summary_table(std::cout, r, view);
    report::print_case_details(std::cout, r, view);
}

void show_case(const std::string& file, const report::Report& r, const std::string& id,
               const std::string& format, const report::View& view) {
    const std::vector<const report::CaseRecord*> records = report::records_named(r, id);
    LAV_CHECK_AS(UsageError, !records.empty(), file, " has no record or case '", id,
                 "'; give an id as `lav show ", file,
                 "` prints it: a case, <case>/<variant> or a whole record id");
    if (format == "json") return report::write_json_records(std::cout, records);
    if (format == "csv") return report::write_csv_records(std::cout, records);
    for (const report::CaseRecord* record : records) {
        report::print_record(std::cout, *record, view);
        std::cout << "\n";
    }
    // each record of a case carries the case's whole trace: told once
    report::print_trace(std::cout, records.front()->trace);
}

}  // namespace

int cmd_show(const std::vector<std::string>& args) {
    po::options_description options("lav show options");
    std::string file;
    std::string case_id;
    std::string format = "table";
    std::string color = "auto";
    options.add_options()("file", po::value(&file)->required()->value_name("RUN.h5"),
                          "the report (.h5)")(
        "case", po::value(&case_id)->value_name("ID"),
        "one case in full: a record id '<case>/<variant>/<backend>/<pass>', '<case>/<variant>' "
        "or a case id; its metrics, findings with their dtype histories, precision contract and "
        "trace")("findings", po::bool_switch(),
                 "every finding of the run, grouped by kind, with the records that carry it")(
        "backends", po::bool_switch(),
        "each family's backends side by side: records by verdict, worst rel_rmse forward and "
        "backward (lav's rows beside a provider's on the same inputs)")(
        "format", po::value(&format)->value_name("table|json|csv"),
        "table (default), json (one document) or csv (a header row, then a row per record, "
        "metric, finding, or family and backend)")(
        "color", po::value(&color)->value_name("auto|always|never"),
        "colour verdicts: auto (default) on a terminal without NO_COLOR");
    po::positional_options_description positional;
    positional.add("file", 1);
    po::variables_map vm;
    if (!parse_args(args, options, positional, usage_line("show", options, positional), vm))
        return 0;
    LAV_CHECK_AS(UsageError, format == "table" || format == "json" || format == "csv",
                 "--format takes table, json or csv, got '", format, "'");
    const bool findings = vm["findings"].as<bool>();
    const bool backends = vm["backends"].as<bool>();
    LAV_CHECK_AS(UsageError, int(!case_id.empty()) + int(findings) + int(backends) <= 1,
                 "--case, --findings and --backends are three views; give one");
    report::View view;
    view.color = use_color(color);

    const report::Report r = read_report_file(file);
    if (!case_id.empty()) {
        show_case(file, r, case_id, format, view);
    } else if (backends) {
        if (format == "json")
            report::write_json_backends(std::cout, r);
        else if (format == "csv")
            report::write_csv_backends(std::cout, r);
        else
            report::print_backends(std::cout, r);
    } else if (!findings) {
        show_summary(file, r, format, view);
    } else if (format == "json") {
        report::write_json_findings(std::cout, r);
    } else if (format == "csv") {
        report::write_csv_findings(std::cout, r);
    } else {
        report::print_findings_by_kind(std::cout, r);
    }
    // the verdicts are the report's data: showing them succeeded (lav run and lav gate judge)
    return static_cast<int>(ExitCode::kPass);
}

}  // namespace lav::cli
