// src/cli/options.cpp — argument parsing, memory sizes and scenario loading shared by subcommands.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <regex>

#include "cli/commands.h"
#include "core/error.h"
#include "scenario/scenario.h"

namespace lav::cli {

bool parse_args(const std::vector<std::string>& args, const po::options_description& options,
                const po::positional_options_description& positional, const std::string& usage,
                po::variables_map& vm) {
    po::options_description all = options;
    all.add_options()("help,h", "show this help");
    try {
        po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
        if (vm.count("help")) {
            std::cout << usage << "\n\n" << all << "\n";
            return false;
        }
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(std::string(e.what()) + "\n" + usage + "\n(see --help)");
    }
    return true;
}

uint64_t parse_memory_size(const std::string& text) {
    static const std::regex kSize(R"(([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?B)?)", std::regex::icase);
    std::smatch m;
    LAV_CHECK_AS(UsageError, std::regex_match(text, m, kSize) && std::stod(m[1]) > 0,
                 "bad memory size '", text,
                 "': write a positive number with K, M, G or T, e.g. 8G");
    const std::string units = "KMGT";
    const auto power = m[2].length() ? units.find(std::toupper(m[2].str()[0])) + 1 : 0;
    return static_cast<uint64_t>(std::stod(m[1]) * std::pow(1024.0, power));
}

uint64_t default_max_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 2 : 8ULL << 30;
}

std::string format_bytes(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ULL << 30));
    return buf;
}

std::vector<scenario::Case> load_cases(const std::vector<std::string>& paths,
                                       const harness::Registry& registry,
                                       const scenario::LoadOptions& options) {
    const scenario::Catalog catalog = registry.catalog();
    const std::vector<std::string> files = scenario::collect_files(paths);
    LAV_CHECK_AS(UsageError, !files.empty(), "no scenario files (*.toml) found in the given paths");
    std::vector<scenario::Case> cases;
    std::map<std::string, std::string> first_file_of;
    std::string errors;
    for (const auto& file : files) {
        try {
            for (auto& c : scenario::load_file(file, catalog, options)) {
                const auto [it, fresh] = first_file_of.emplace(c.name, file);
                if (!fresh && it->second != file) {
                    throw ScenarioError(file + ":1:1: error: scenario name '" + c.name +
                                        "' is already used by " + it->second +
                                        "\nnote: give each scenario file its own name");
                }
                cases.push_back(std::move(c));
            }
        } catch (const ScenarioError& e) {
            errors += std::string(errors.empty() ? "" : "\n") + e.what();
        }
    }
    if (!errors.empty()) throw ScenarioError(errors);
    return cases;
}

}  // namespace lav::cli
