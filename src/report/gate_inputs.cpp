// src/report/gate_inputs.cpp — what the gate refuses to compare: reports it cannot stand on.
#include <cmath>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "report/gate.h"

namespace lav::report {
namespace {

[[noreturn]] void refuse(const std::string& file, const std::string& what, const std::string& fix) {
    throw ReportError(file + ": error: " + what + "\nnote: " + fix);
}

std::string number(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return text;
}

void check_metrics(const CaseRecord& c, const std::string& file, bool baseline,
                   const GateOptions& options) {
    for (const MetricRow& m : c.metrics) {
        const std::string where = "case " + c.id + " tensor " + m.tensor;
        for (const auto& [measure, value] : {std::pair<const char*, double>{"rel_rmse", m.rel_rmse},
                                             {"max_abs", m.max_abs},
                                             {"max_rel", m.max_rel},
                                             {"nonfinite", static_cast<double>(m.nonfinite)}}) {
            if (value < 0)
                refuse(file,
                       where + " has " + measure + " " + number(value) +
                           ", below zero, which no measure is",
                       "the report was changed after lav wrote it; run the scenarios again");
            if (baseline && !std::isfinite(value) && !options.allow_nonfinite_baseline)
                refuse(file,
                       where + " has " + measure + " " + number(value) +
                           " in the baseline: no run can be worse, so the measure would never "
                           "regress",
                       "fix the kernel and write the baseline again (lav gate --update-baseline), "
                       "or pass --allow-nonfinite-baseline to compare with such a baseline");
        }
    }
}

}  // namespace

void check_gate_input(const Report& report, const std::string& file, bool baseline,
                      const GateOptions& options) {
    const char* role = baseline ? "baseline" : "run";
    if (!report.complete && !options.allow_incomplete)
        refuse(file,
               std::string("the ") + role + " is incomplete (complete = 0): it ended before its " +
                   "last case, or is still running",
               "finish it (lav run <paths> --resume " + file +
                   "), or pass --allow-incomplete to gate the cases it has");
    std::set<std::string> seen;
    for (const CaseRecord& c : report.cases) {
        if (!seen.insert(c.id).second)
            refuse(file, "case " + c.id + " is in the " + role + " twice",
                   "one report holds each case once; run the scenarios again into a new report");
        check_metrics(c, file, baseline, options);
    }
}

}  // namespace lav::report
