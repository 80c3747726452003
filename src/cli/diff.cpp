// src/cli/diff.cpp — `lav diff`: two reports side by side, environment first, largest changes next.
#include "report/diff.h"

#include <iostream>

#include "cli/commands.h"
#include "core/error.h"

namespace lav::cli {

int cmd_diff(const std::vector<std::string>& args) {
    po::options_description options("lav diff options");
    std::vector<std::string> files;
    size_t top = 30;
    options.add_options()("files", po::value(&files)->required(), "two reports, A and B")(
        "top", po::value(&top), "show this many changes (default 30, 0 for all)");
    po::positional_options_description positional;
    positional.add("files", 2);
    po::variables_map vm;
    if (!parse_args(args, options, positional, "usage: lav diff A.h5 B.h5 [--top N]", vm)) return 0;
    LAV_CHECK_AS(UsageError, files.size() == 2, "lav diff takes two reports, got ", files.size());

    const report::Report a = read_report_file(files[0]);
    const report::Report b = read_report_file(files[1]);
    std::cout << "A: " << files[0] << "\nB: " << files[1] << "\n\n";
    report::print_diff(std::cout, a, b, top);
    return 0;
}

}  // namespace lav::cli
