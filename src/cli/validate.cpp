// src/cli/validate.cpp — `lav validate`: loads scenario files and reports their cases, runs
// nothing.
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "report/console.h"

namespace lav::cli {

int cmd_validate(const std::vector<std::string>& args) {
    po::options_description options("lav validate options");
    std::vector<std::string> paths;
    std::string max_memory;
    options.add_options()("paths", po::value(&paths)->required(), "scenario files or folders")(
        "max-memory", po::value(&max_memory),
        "largest estimated case size allowed (default: half of RAM)")(
        "long", po::bool_switch(), "also size up the cases marked long, as `lav run --long` would");
    po::positional_options_description positional;
    positional.add("paths", -1);
    po::variables_map vm;
    if (!parse_args(args, options, positional,
                    "usage: lav validate <files|dirs>... [--max-memory SIZE] [--long]", vm))
        return 0;

    harness::Registry registry;
    harness::register_all(registry);
    const uint64_t limit =
        max_memory.empty() ? default_max_memory() : parse_memory_size(max_memory);
    const auto cases = load_cases(paths, registry, {limit, vm["long"].as<bool>()});
    std::map<std::string, int> per_file;
    for (const auto& c : cases) ++per_file[c.file];
    for (const auto& [file, n] : per_file)
        std::cout << "ok  " << file << "  (" << report::plural(n, "case") << ")\n";
    return 0;
}

}  // namespace lav::cli
