// src/cli/options.cpp — argument parsing, memory sizes and scenario loading shared by subcommands.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "report/report.h"
#include "scenario/scenario.h"

namespace lav::cli {
namespace {

// below a mebibyte no case fits, and such a limit is more likely a slip (0.5 meant as 0.5G)
constexpr uint64_t kMinMaxMemory = uint64_t{1} << 20;

}  // namespace

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
    const auto bad = [&](const std::string& why) {
        return UsageError("bad --max-memory '" + text + "': " + why +
                          "; write whole digits with an optional K, M, G or T (powers of 1024), "
                          "at least 1M, e.g. 512M or 8G");
    };
    std::size_t digits = 0;
    uint64_t value = 0;
    for (; digits < text.size() && text[digits] >= '0' && text[digits] <= '9'; ++digits) {
        const uint64_t digit = static_cast<uint64_t>(text[digits] - '0');
        if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw bad("too large");
        value = value * 10 + digit;
    }
    const std::string suffix = text.substr(digits);
    const std::string units = "KMGT";
    const std::size_t unit =
        suffix.size() == 1
            ? units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))))
            : 0;
    if (digits == 0 || suffix.size() > 1 || unit == std::string::npos) throw bad("not a size");
    const int shift = suffix.empty() ? 0 : 10 * static_cast<int>(unit + 1);
    if (value > std::numeric_limits<uint64_t>::max() >> shift) throw bad("too large");
    const uint64_t bytes = value << shift;
    if (bytes < kMinMaxMemory) throw bad("less than 1M");
    return bytes;
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

report::Report read_report_file(const std::string& path) {
    if (const auto kind = non_regular_kind(path))
        throw UsageError(path + " is " + *kind + ", not a report: give the .h5 file lav run wrote");
    return report::read_report(path);
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
