// src/cli/show.cpp — `lav show`: a report as a console table, with the failing cases spelled out.
#include <algorithm>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "report/console.h"
#include "report/report.h"

namespace lav::cli {

int cmd_show(const std::vector<std::string>& args) {
    po::options_description options("lav show options");
    std::string file;
    options.add_options()("file", po::value(&file)->required(), "the report (.h5)");
    po::positional_options_description positional;
    positional.add("file", 1);
    po::variables_map vm;
    if (!parse_args(args, options, positional, "usage: lav show <report.h5>", vm)) return 0;

    const report::Report r = read_report_file(file);
    std::cout << file << ": " << r.run.command_line << "\n"
              << "lav " << r.run.lav_version << " (" << r.run.git_commit << "), LibTorch "
              << r.run.torch_version << ", " << r.run.device << ", " << r.run.started_at << "\n\n";
    report::print_summary_table(std::cout, r);
    report::print_case_details(std::cout, r);
    const bool failed = std::any_of(r.cases.begin(), r.cases.end(), [](const auto& c) {
        return c.verdict == "fail" || c.verdict == "error";
    });
    return static_cast<int>(failed ? ExitCode::kVerificationFailed : ExitCode::kPass);
}

}  // namespace lav::cli
