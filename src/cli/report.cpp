// src/cli/report.cpp — `lav report`: the HTML report, written by lav's Python package (lav.html).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"

extern char** environ;

namespace lav::cli {

namespace {

constexpr const char kInstall[] =
    "run tools/setup.sh (it makes .venv with plotly, h5py and pandas), or name another Python "
    "that has them in LAV_PYTHON";

// The interpreter configure recorded (the project's .venv), unless LAV_PYTHON names another.
std::string python_executable() {
    const char* chosen = std::getenv("LAV_PYTHON");
    return chosen && *chosen ? chosen : kPython;
}

// Runs `argv` and waits; its exit code, or an error when it could not start or was killed.
int run_child(const std::vector<std::string>& argv) {
    std::vector<char*> c_argv;
    for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    pid_t pid = 0;
    const int started = posix_spawn(&pid, c_argv[0], nullptr, nullptr, c_argv.data(), environ);
    LAV_CHECK_AS(EnvironmentError, started == 0, "lav report needs Python (", argv[0],
                 "): ", std::strerror(started), "; ", kInstall);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        LAV_CHECK_AS(InternalError, errno == EINTR, "waiting for ", argv[0], ": ",
                     std::strerror(errno));
    }
    LAV_CHECK_AS(InternalError, WIFEXITED(status), argv[0], " was killed by signal ",
                 WTERMSIG(status));
    return WEXITSTATUS(status);
}

}  // namespace

int cmd_report(const std::vector<std::string>& args) {
    po::options_description options("lav report options");
    std::string run, out, baseline, intermediates;
    options.add_options()("run", po::value(&run)->required(), "the report (RUN.h5) to show")(
        "out,o", po::value(&out)->required(), "the HTML file to write")(
        "baseline", po::value(&baseline), "a report to compare with: what moved, per tensor")(
        "intermediates", po::value(&intermediates),
        "the folder of `lav run --dump-intermediates` (default: the one the run's command line "
        "names, if it exists)");
    po::positional_options_description positional;
    positional.add("run", 1);
    po::variables_map vm;
    if (!parse_args(args, options, positional,
                    "usage: lav report RUN.h5 [--baseline BASE.h5] [--intermediates DIR] -o "
                    "run.html\n\nWrites one self-contained HTML page (it opens offline): the "
                    "summary and findings,\nheat maps of rel_rmse over the matrix axes, each "
                    "case's error along the sequence,\nand with --baseline what moved. Written "
                    "by lav's Python package (lav.html)\nwith plotly, run by the interpreter "
                    "configure found (.venv) or LAV_PYTHON.",
                    vm))
        return 0;

    std::vector<std::string> argv = {python_executable(), "-m", "lav.html", run, "--out", out};
    if (!baseline.empty()) argv.insert(argv.end(), {"--baseline", baseline});
    if (!intermediates.empty()) argv.insert(argv.end(), {"--intermediates", intermediates});
    // lav's package from the source tree, ahead of anything installed under the same name
    const char* path = std::getenv("PYTHONPATH");
    const std::string python_path =
        std::string(kPythonPackageDir) + (path && *path ? std::string(":") + path : "");
    setenv("PYTHONPATH", python_path.c_str(), 1);
    const int code = run_child(argv);
    // lav.html exits 2 on a bad argument or report and 3 when a library is missing, saying how
    // to install it; 1 is an exception it did not expect
    LAV_CHECK_AS(InternalError, code != 1, "lav.html failed (", argv[0], "); above is why");
    return code;
}

}  // namespace lav::cli
