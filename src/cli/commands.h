// src/cli/commands.h — the subcommands of `lav` and the helpers they share.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/registry.h"
#include "report/report.h"
#include "scenario/case.h"
#include "scenario/scenario.h"

namespace lav::cli {

namespace po = boost::program_options;

/// Each subcommand takes its arguments (without "lav <name>") and returns the exit code.
int cmd_run(const std::vector<std::string>& args, const std::string& command_line);
int cmd_validate(const std::vector<std::string>& args);
int cmd_list(const std::vector<std::string>& args);
int cmd_show(const std::vector<std::string>& args);
int cmd_gate(const std::vector<std::string>& args);
int cmd_diff(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_merge(const std::vector<std::string>& args, const std::string& command_line);

/// Parses `args` against `options` (positional arguments fill `positional`'s names). Prints
/// `usage` and the options (less the positional ones) and returns false on --help; throws
/// UsageError on bad arguments.
bool parse_args(const std::vector<std::string>& args, const po::options_description& options,
                const po::positional_options_description& positional, const std::string& usage,
                po::variables_map& vm);

/// "usage: lav <command> <paths>... [--out F] [--long] ...": the positional arguments by their
/// value names, then every other option of `options`, wrapped at 100 columns.
std::string usage_line(const std::string& command, const po::options_description& options,
                       const po::positional_options_description& positional);

/// Whether stdout gets colours under --color `mode` (auto, always, never): auto is a terminal
/// without NO_COLOR in the environment. Throws UsageError for another mode.
bool use_color(const std::string& mode);

/// The variable lav sets beside OMP_WAIT_POLICY when it chose the policy itself (main.cpp).
inline constexpr const char kWaitPolicySetByLav[] = "LAV_SET_OMP_WAIT_POLICY";

/// "threads: 2 LibTorch threads, OMP_WAIT_POLICY=PASSIVE (set by lav)": what --verbose says.
std::string threading_note();

/// "8G", "512M", "1048576" → bytes: whole digits and an optional K, M, G or T (powers of 1024,
/// either case), at least 1M. Throws UsageError saying the accepted form for anything else.
uint64_t parse_memory_size(const std::string& text);
/// Half of this machine's physical memory: the default of --max-memory.
uint64_t default_max_memory();
/// Bytes as "12.3 GiB".
std::string format_bytes(uint64_t bytes);

/// The report at `path`; a FIFO or a device is refused (UsageError) before anything opens it,
/// since reading one would block or never end.
report::Report read_report_file(const std::string& path);

/// Loads every scenario file under `paths`; all files are checked before anything runs, and
/// their diagnostics are reported together. Scenario names must be unique across the run.
std::vector<scenario::Case> load_cases(const std::vector<std::string>& paths,
                                       const harness::Registry& registry,
                                       const scenario::LoadOptions& options);

}  // namespace lav::cli
