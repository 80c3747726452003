// src/cli/stored_scenarios.cpp — scenario files into a report, and back out of one.
#include "cli/stored_scenarios.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"

namespace lav::cli {

namespace fs = std::filesystem;

void keep_scenarios(const std::vector<std::string>& files,
                    const std::map<std::string, std::string>& copies, report::RunInfo& run) {
    for (const auto& file : files) {
        if (std::find(run.scenario_paths.begin(), run.scenario_paths.end(), file) !=
            run.scenario_paths.end())
            continue;
        const auto copy = copies.find(file);
        const std::string source = copy != copies.end() ? copy->second : file;
        std::ifstream in(source, std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        LAV_CHECK_AS(EnvironmentError, in.good() || in.eof(), "cannot read ", source,
                     " again to keep it in the report");
        run.scenario_paths.push_back(file);
        run.scenario_texts.push_back(text.str());
    }
}

std::map<std::string, std::string> restore_scenarios(const std::string& path,
                                                     const std::string& dir) {
    const report::Report r = read_report_file(path);
    LAV_CHECK_AS(UsageError, !r.run.scenario_paths.empty(), path,
                 " carries no scenario files (it was written by a lav before reports kept "
                 "them): run its scenario files by their paths");
    std::map<std::string, std::string> restored;
    for (size_t i = 0; i < r.run.scenario_paths.size(); ++i) {
        const fs::path folder = fs::path(dir) / std::to_string(i);
        fs::create_directories(folder);
        const fs::path file = folder / fs::path(r.run.scenario_paths[i]).filename();
        std::ofstream(file, std::ios::binary) << r.run.scenario_texts[i];
        restored[file.string()] = r.run.scenario_paths[i];
    }
    return restored;
}

}  // namespace lav::cli
