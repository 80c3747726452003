// src/cli/isolate.h — lav run --isolate: each case in a child lav process, so that a kernel that
// crashes (a segfault, an abort, a sticky CUDA error) costs its case and the run goes on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "report/report.h"
#include "scenario/case.h"

namespace lav::cli {

/// What a child needs besides its case: the run's own options, as `lav run` arguments
/// ("--backend", "cpu", "--threads", "2", ...).
struct Isolation {
    std::vector<std::string> options;
    std::string scratch_dir;  ///< where the children's reports and logs go while they run
};

/// Runs `c` as `lav run <c.file> --case <c.id> --out <scratch> <options>` in a child process and
/// hands `sink` the records it wrote. For each id of `expected` the child did not write (it
/// was killed by a signal, or exited with an error of its own), an "error" record saying how
/// the child ended and the last lines it printed.
void run_isolated(const scenario::Case& c, const std::vector<report::CaseRecord>& expected,
                  const Isolation& isolation, const std::function<void(report::CaseRecord)>& sink);

}  // namespace lav::cli
