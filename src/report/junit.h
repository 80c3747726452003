// src/report/junit.h — JUnit XML for CI test reporters (GitHub Actions, GitLab, Jenkins).
#pragma once

#include <string>

#include "report/gate.h"
#include "report/report.h"

namespace lav::report {

/// One <testcase> per case of the run: classname = scenario, name = case id; a failed case
/// carries <failure message="one-line reason">, a case that could not run an <error>.
void write_junit_run(const std::string& path, const Report& run);

/// One <testcase> per case of the gate (run and baseline together): regressions and missing
/// cases are failures whose message names the measure or says which side lacks the case.
void write_junit_gate(const std::string& path, const GateResult& result, const Report& run,
                      const Report& baseline, const GateOptions& options);

}  // namespace lav::report
