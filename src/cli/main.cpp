// src/cli/main.cpp — the lav executable: dispatches subcommands and alone decides exit codes.
#include <c10/util/Exception.h>

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
  show      print a report as a table
  gate      compare a run with a baseline (the CI numeric gate)
  diff      two reports side by side: environment, then the largest changes
  report    a report as one self-contained HTML page with plots

`lav <command> --help` describes each command.
exit codes: 0 pass, 1 verification failed, 2 bad usage or scenario, 3 environment, 4 internal)";

int dispatch(const std::string& command, const std::vector<std::string>& args,
             const std::string& command_line) {
    using namespace lav::cli;
    if (command == "run") return cmd_run(args, command_line);
    if (command == "validate") return cmd_validate(args);
    if (command == "list") return cmd_list(args);
    if (command == "show") return cmd_show(args);
    if (command == "gate") return cmd_gate(args);
    if (command == "diff") return cmd_diff(args);
    if (command == "report") return cmd_report(args);
    throw lav::UsageError("unknown command '" + command + "'\n" + kUsage);
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

    if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
        std::cout << kUsage << "\n";
        return all.empty() ? static_cast<int>(lav::ExitCode::kUsage) : 0;
    }
    if (all[0] == "--version") {
        std::cout << "lav " << lav::kLavVersion << " (" << lav::kGitCommit << "), LibTorch "
                  << lav::kTorchVersion << ", HDF5 " << lav::kHdf5Version
                  << (lav::kCudaBuild ? ", CUDA" : ", CPU only") << "\n";
        return 0;
    }
    try {
        return dispatch(all[0], {all.begin() + 1, all.end()}, command_line);
    } catch (const lav::InternalError& e) {
        std::cerr << "lav: " << e.what() << "\n";
        return static_cast<int>(e.exit_code());
    } catch (const lav::ScenarioError& e) {
        // already rendered as file:line:col diagnostics
        std::cerr << e.what() << "\n";
        return static_cast<int>(e.exit_code());
    } catch (const lav::Error& e) {
        std::cerr << "lav: error: " << e.what() << "\n";
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

}  // namespace

int main(int argc, char** argv) {
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
