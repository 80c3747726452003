// src/cli/stored_scenarios.h — the scenario files a report carries, so that it can be run
// again where the files are not (lav run --from-report).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "report/report.h"

namespace lav::cli {

/// Puts the text of each of `files` (in order, once each) into `run`, read from the copy
/// `copies` names for it where it has one (a restored file), else from the file itself.
void keep_scenarios(const std::vector<std::string>& files,
                    const std::map<std::string, std::string>& copies, report::RunInfo& run);

/// Writes the scenario files the report at `path` carries into `dir`, a folder each (two may
/// share a name), and returns where each went, mapped to the name it was run under. Throws
/// UsageError when the report carries none (it was written before reports did).
std::map<std::string, std::string> restore_scenarios(const std::string& path,
                                                     const std::string& dir);

}  // namespace lav::cli
