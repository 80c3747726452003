// src/cli/gate.cpp — `lav gate`: compares a run with a baseline; exits 1 on a regression or missing
// case.
#include "report/gate.h"

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "report/console.h"
#include "report/junit.h"

namespace lav::cli {
namespace {

// "--slack rel_rmse=0.2" and "--floor max_abs=1e-5" adjust one measure's tolerance
void apply_overrides(const std::vector<std::string>& items, bool slack,
                     std::map<std::string, report::Tolerance>& tolerances) {
    for (const auto& item : items) {
        const auto eq = item.find('=');
        const std::string measure = item.substr(0, eq);
        const auto it = tolerances.find(measure);
        LAV_CHECK_AS(
            UsageError, eq != std::string::npos && it != tolerances.end(), "bad ",
            slack ? "--slack" : "--floor", " '", item,
            "': write MEASURE=VALUE with MEASURE one of rel_rmse, max_rel, max_abs, nonfinite");
        double value = 0;
        try {
            value = std::stod(item.substr(eq + 1));
        } catch (const std::exception&) {
            throw UsageError("bad number in '" + item + "'");
        }
        LAV_CHECK_AS(UsageError, value >= 0, "'", item, "' must not be negative");
        (slack ? it->second.slack : it->second.floor) = value;
    }
}

// whether `a` and `b` name one file (links, "..", another spelling), existing or not
bool same_file(const std::string& a, const std::string& b) {
    std::error_code error_a, error_b;
    if (std::filesystem::equivalent(a, b, error_a)) return true;
    const auto canonical_a = std::filesystem::weakly_canonical(a, error_a);
    const auto canonical_b = std::filesystem::weakly_canonical(b, error_b);
    return !error_a && !error_b && canonical_a == canonical_b;
}

}  // namespace

int cmd_gate(const std::vector<std::string>& args) {
    po::options_description options("lav gate options");
    std::string run_file, baseline_file, junit;
    std::vector<std::string> slack, floor;
    options.add_options()("run", po::value(&run_file)->required(), "the run's report")(
        "baseline", po::value(&baseline_file)->required(), "the baseline report")(
        "allow-missing", po::bool_switch(), "do not fail on cases found on one side only")(
        "allow-incomplete", po::bool_switch(),
        "gate a run or baseline that did not finish (complete = 0) on the cases it has")(
        "allow-nonfinite-baseline", po::bool_switch(),
        "compare with a baseline that has NaN or Inf measures (those never regress, except to "
        "NaN)")("slack", po::value(&slack)->composing(),
                "MEASURE=X: regress above baseline x (1 + X) (defaults: rel_rmse 0.1, max_rel 0.5, "
                "max_abs 0.5, nonfinite 0)")(
        "floor", po::value(&floor)->composing(),
        "MEASURE=X: values at or below X never regress (defaults: rel_rmse 1e-6, max_rel 1e-4, "
        "max_abs 1e-6, nonfinite 0)")(
        "update-baseline", po::bool_switch(),
        "write the run as the new baseline (ids, verdicts, measures only) and exit 0")(
        "junit", po::value(&junit), "also write the gate's result as JUnit XML");
    po::positional_options_description positional;
    positional.add("run", 1);
    po::variables_map vm;
    if (!parse_args(
            args, options, positional,
            "usage: lav gate RUN.h5 --baseline BASE.h5 [--allow-missing] "
            "[--allow-incomplete]\n                [--allow-nonfinite-baseline] [--slack M=X] "
            "[--floor M=X] [--junit F] [--update-baseline]",
            vm))
        return 0;

    report::GateOptions gate_options;
    gate_options.allow_missing = vm["allow-missing"].as<bool>();
    gate_options.allow_incomplete = vm["allow-incomplete"].as<bool>();
    gate_options.allow_nonfinite_baseline = vm["allow-nonfinite-baseline"].as<bool>();
    apply_overrides(slack, true, gate_options.tolerances);
    apply_overrides(floor, false, gate_options.tolerances);

    const report::Report run = read_report_file(run_file);
    if (vm["update-baseline"].as<bool>()) {
        LAV_CHECK_AS(
            UsageError, run.complete, run_file,
            " is an incomplete run; finish it (lav run --resume) before making it a baseline");
        LAV_CHECK_AS(UsageError, !same_file(run_file, baseline_file), "--baseline ", baseline_file,
                     " is the run ", run_file,
                     " itself: --update-baseline would replace the run with its baseline; give "
                     "the baseline another name");
        // a baseline the gate would refuse is refused before it is written
        report::check_gate_input(run, run_file, true, gate_options);
        report::write_report(baseline_file, report::make_baseline(run));
        std::cout << "baseline written: " << baseline_file << " ("
                  << report::plural(run.cases.size(), "case") << ")\n";
        return 0;
    }
    const report::Report baseline = read_report_file(baseline_file);
    report::check_gate_input(run, run_file, false, gate_options);
    report::check_gate_input(baseline, baseline_file, true, gate_options);

    const report::GateResult result = report::gate(run, baseline, gate_options);
    report::print_gate(std::cout, result, gate_options);
    if (!junit.empty()) report::write_junit_gate(junit, result, run, baseline, gate_options);
    return static_cast<int>(result.passed(gate_options) ? ExitCode::kPass
                                                        : ExitCode::kVerificationFailed);
}

}  // namespace lav::cli
