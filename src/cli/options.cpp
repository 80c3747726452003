// src/cli/options.cpp — argument parsing, memory sizes and scenario loading shared by subcommands.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
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

constexpr size_t kUsageColumns = 100;

bool unbounded(const po::positional_options_description& positional) {
    return positional.max_total_count() == std::numeric_limits<unsigned>::max();
}

// The long names `positional` fills, in order, each once.
std::vector<std::string> positional_names(const po::positional_options_description& positional) {
    std::vector<std::string> names;
    // an unbounded list repeats its last name from some position on
    const unsigned count = unbounded(positional) ? 16u : positional.max_total_count();
    for (unsigned i = 0; i < count; ++i) {
        const std::string& name = positional.name_for_position(i);
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
}

bool is_positional(const po::positional_options_description& positional, const std::string& name) {
    const std::vector<std::string> names = positional_names(positional);
    return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

bool parse_args(const std::vector<std::string>& args, const po::options_description& options,
                const po::positional_options_description& positional, const std::string& usage,
                po::variables_map& vm) {
    po::options_description all = options;
    all.add_options()("help,h", "show this help");
    try {
        po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
        if (vm.count("help")) {
            // positional arguments are in the usage line, not options to write as --name
            po::options_description shown;
            for (const auto& o : all.options())
                if (!is_positional(positional, o->long_name())) shown.add(o);
            std::cout << usage << "\n\noptions:\n" << shown << "\n";
            return false;
        }
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(std::string(e.what()) + "\n" + usage + "\n(see --help)");
    }
    return true;
}

std::string usage_line(const std::string& command, const po::options_description& options,
                       const po::positional_options_description& positional) {
    std::vector<std::string> words;
    for (const auto& name : positional_names(positional))
        words.push_back("<" + options.find(name, false).format_parameter() + ">" +
                        (unbounded(positional) ? "..." : ""));
    for (const auto& o : options.options()) {
        if (is_positional(positional, o->long_name())) continue;
        // the value's name without its default: "B (=auto)" -> "B"
        const std::string format = o->format_parameter();
        const std::string value = format.substr(0, format.find(" (="));
        words.push_back("[--" + o->long_name() + (value.empty() ? "" : " " + value) + "]");
    }
    const std::string head = "usage: lav " + command;
    std::string text = head;
    size_t column = head.size();
    for (const auto& w : words) {
        if (column + 1 + w.size() > kUsageColumns) {
            text += "\n" + std::string(head.size(), ' ');
            column = head.size();
        }
        text += " " + w;
        column += 1 + w.size();
    }
    return text;
}

bool use_color(const std::string& mode) {
    if (mode == "always") return true;
    if (mode == "never") return false;
    LAV_CHECK_AS(UsageError, mode == "auto", "--color takes auto, always or never, got '", mode,
                 "'");
    return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
}

std::string threading_note() {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    return "threads: " + std::to_string(at::get_num_threads()) + " LibTorch threads, " +
           (policy ? std::string("OMP_WAIT_POLICY=") + policy +
                         (std::getenv(kWaitPolicySetByLav) ? " (set by lav)"
                                                           : " (from the environment)")
                   : std::string("OMP_WAIT_POLICY unset (idle threads spin)"));
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
