// src/cli/main.cpp — the lav executable: dispatches subcommands and alone decides exit codes.
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/printable.h"

namespace {

constexpr const char kUsage[] = R"(lav — the linear-attention verifier

usage: lav <command> [options]

commands:
  run       run scenario files against the float64 reference and write an HDF5 report
  validate  check scenario files without running them
  list      families, variants, backends and dtypes of this build
  show      print a report: summary, one case, every finding, or the backends side by side
  gate      compare a run with a baseline (the CI numeric gate)
  diff      two reports side by side: environment, then the largest changes
  merge     join the reports of a run's shards (lav run --shard K/N) into one
  report    a report as one self-contained HTML page with plots
  version   lav's version and what it was built with

`lav help <command>` (or `lav <command> --help`) describes each command.
exit codes: 0 pass (and any report lav show could show), 1 verification failed, 2 bad usage or
scenario, 3 environment, 4 internal)";

const std::vector<std::string> kCommands = {"run",  "validate", "list",   "show",   "gate",
                                            "diff", "merge",    "report", "version"};

// Edits (insert, delete, replace, swap two neighbours) that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i)
        for (size_t j = 1; j <= b.size(); ++j) {
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                                d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

lav::UsageError unknown_command(const std::string& command) {
    std::string nearest;
    size_t best = 3;  // further than two edits is another word, not a slip
    for (const auto& known : kCommands) {
        const size_t distance = edit_distance(command, known);
        if (distance < best && distance < command.size()) best = distance, nearest = known;
    }
    if (!nearest.empty())
        return lav::UsageError("unknown command '" + command + "'; did you mean '" + nearest +
                               "'?");
    std::string names;
    for (const auto& known : kCommands) names += (names.empty() ? "" : ", ") + known;
    return lav::UsageError("unknown command '" + command + "'; the commands are " + names +
                           " (`lav --help` says what each does)");
}

void print_version() {
    std::cout << "lav " << lav::kLavVersion << " (" << lav::kGitCommit << "), LibTorch "
              << lav::kTorchVersion << ", HDF5 " << lav::kHdf5Version
              << (lav::kCudaBuild ? ", CUDA" : ", CPU only") << "\n";
}

int dispatch(const std::string& command, const std::vector<std::string>& args,
             const std::string& command_line) {
    using namespace lav::cli;
    if (command == "run") return cmd_run(args, command_line);
    if (command == "validate") return cmd_validate(args);
    if (command == "list") return cmd_list(args);
    if (command == "show") return cmd_show(args);
    if (command == "gate") return cmd_gate(args);
    if (command == "diff") return cmd_diff(args);
    if (command == "merge") return cmd_merge(args, command_line);
    if (command == "report") return cmd_report(args);
    throw unknown_command(command);
}

constexpr const char kMemoryNote[] =
    "note: lower the case's sizes, or --max-memory so that lav refuses such cases before they "
    "run";

// LibTorch's CPU allocator says how much it was asked for, in an error of its own kind or not
bool is_out_of_memory(const c10::Error& e) {
    return dynamic_cast<const c10::OutOfMemoryError*>(&e) ||
           e.msg().find("you tried to allocate") != std::string::npos;
}

int internal_error(const std::exception& e) {
    std::cerr << "lav: internal error: " << e.what() << " — please report\n";
    return static_cast<int>(lav::ExitCode::kInternal);
}

// `lav <all...>`; the one place where errors become exit codes
int lav_main(const std::vector<std::string>& all) {
    std::string command_line = "lav";
    for (const auto& a : all) command_line += " " + a;

    if (all.empty()) {
        std::cerr << kUsage << "\n";
        return static_cast<int>(lav::ExitCode::kUsage);
    }
    if (all[0] == "--help" || all[0] == "-h" || (all[0] == "help" && all.size() == 1)) {
        std::cout << kUsage << "\n";
        return 0;
    }
    if (all[0] == "--version" || all[0] == "version") {
        print_version();
        return 0;
    }
    try {
        // `lav help run` is `lav run --help`
        if (all[0] == "help") return dispatch(all[1], {"--help"}, command_line);
        return dispatch(all[0], {all.begin() + 1, all.end()}, command_line);
    } catch (const lav::InternalError& e) {
        std::cerr << "lav: " << e.what() << "\n";
        return static_cast<int>(e.exit_code());
    } catch (const lav::ScenarioError& e) {
        // already rendered as file:line:col diagnostics
        std::cerr << e.what() << "\n";
        return static_cast<int>(e.exit_code());
    } catch (const lav::Error& e) {
        // a message that names its place ("run.h5: error: no such file") is a diagnostic as it
        // stands
        const std::string what = e.what();
        const bool placed = what.substr(0, what.find('\n')).find(": error: ") != std::string::npos;
        std::cerr << (placed ? "" : "lav: error: ") << what << "\n";
        return static_cast<int>(e.exit_code());
    } catch (const std::bad_alloc& e) {
        std::cerr << "lav: error: out of memory: an allocation failed (" << e.what() << ")\n"
                  << kMemoryNote << "\n";
        return static_cast<int>(lav::ExitCode::kEnvironment);
    } catch (const c10::Error& e) {
        if (!is_out_of_memory(e)) return internal_error(e);
        std::cerr << "lav: error: out of memory: " << e.msg() << "\n" << kMemoryNote << "\n";
        return static_cast<int>(lav::ExitCode::kEnvironment);
    } catch (const std::exception& e) {
        return internal_error(e);
    }
}

// LibTorch's OpenMP runtime reads OMP_WAIT_POLICY once, as it loads (before main), and by default
// its idle threads spin: on a busy machine that spinning took most of a run's time. So `lav run`
// sets the variable where the environment leaves it unset and starts itself again, once.
void passive_threads(char** argv) {
    if (!argv[1] || std::string(argv[1]) != "run" || std::getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv(lav::cli::kWaitPolicySetByLav, "1", 1);
    execv("/proc/self/exe", argv);
    // lav could not start itself again: it runs on with the runtime's default
    unsetenv("OMP_WAIT_POLICY");
    unsetenv(lav::cli::kWaitPolicySetByLav);
}

}  // namespace

int main(int argc, char** argv) {
    passive_threads(argv);
    lav::keep_freed_heap();
    // what lav prints carries text from scenario files and reports: their control characters
    // are shown as escapes rather than obeyed by the terminal
    lav::PrintableBuf out(std::cout.rdbuf());
    lav::PrintableBuf err(std::cerr.rdbuf());
    std::streambuf* const stdout_buf = std::cout.rdbuf(&out);
    std::streambuf* const stderr_buf = std::cerr.rdbuf(&err);
    const int code = lav_main({argv + 1, argv + argc});
    std::cout.flush();
    std::cerr.flush();
    std::cout.rdbuf(stdout_buf);
    std::cerr.rdbuf(stderr_buf);
    return code;
}
