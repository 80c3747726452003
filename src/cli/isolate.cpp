// src/cli/isolate.cpp — a case in a child lav process, and the records of one that died.
#include "cli/isolate.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"

namespace lav::cli {
namespace {

namespace fs = std::filesystem;

// the lines of a dead child's output that its error records keep
constexpr size_t kTailLines = 6;

std::string tail_of(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    std::string out;
    for (size_t i = lines.size() > kTailLines ? lines.size() - kTailLines : 0; i < lines.size();
         ++i)
        out += "\n  " + lines[i];
    return out;
}

// how the child ended, in words: "was killed by signal 11 (Segmentation fault)"
std::string ending(int status) {
    if (WIFSIGNALED(status))
        return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
               strsignal(WTERMSIG(status)) + ")";
    return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int run_child(const std::vector<std::string>& args, const std::string& log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = fork();
    LAV_CHECK_AS(EnvironmentError, pid >= 0,
                 "--isolate cannot start a process: ", std::strerror(errno));
    if (pid == 0) {
        // the child: its output goes to the log, which the parent reads when it dies
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

}  // namespace

void run_isolated(const scenario::Case& c, const std::vector<report::CaseRecord>& expected,
                  const Isolation& isolation, const std::function<void(report::CaseRecord)>& sink) {
    static int serial = 0;
    const std::string stem = (fs::path(isolation.scratch_dir) /
                              ("case-" + std::to_string(getpid()) + "-" + std::to_string(serial++)))
                                 .string();
    const std::string out = stem + ".h5", log = stem + ".log";
    std::vector<std::string> args = {"lav", "run", c.file, "--case", c.id, "--out", out};
    args.insert(args.end(), isolation.options.begin(), isolation.options.end());
    const int status = run_child(args, log);

    std::set<std::string> written;
    const bool normal = WIFEXITED(status) && WEXITSTATUS(status) <= 1;
    if (fs::exists(out)) {
        try {
            for (auto& r : report::read_report(out).cases) {
                written.insert(r.id);
                sink(std::move(r));
            }
        } catch (const Error&) {
            // a child killed while writing leaves no readable report: its records are errors
        }
    }
    const std::string output = tail_of(log);
    const std::string why = "the case's process " + ending(status) +
                            (normal ? " without writing this record" : "") +
                            (output.empty() ? "" : "; its last output:" + output);
    for (const auto& blank : expected) {
        if (written.count(blank.id)) continue;
        report::CaseRecord r = blank;
        r.verdict = "error";
        r.message = why;
        sink(std::move(r));
    }
    std::error_code ignored;
    fs::remove(out, ignored);
    fs::remove(log, ignored);
}

}  // namespace lav::cli
