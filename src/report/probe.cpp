// src/report/probe.cpp — a report read once in a child process under a memory cap.
#include "report/probe.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>

#include "core/error.h"

namespace lav::report {
namespace {

constexpr rlim_t kHeadroom = rlim_t{1} << 30;  // what a report's strings may take at most
constexpr int kOutOfMemory = 3;
constexpr unsigned kBaseSeconds = 5;

// the process's virtual size, from /proc/self/status ("VmSize:  123456 kB"); 0 when unknown
rlim_t virtual_size() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
    return 0;
}

}  // namespace

void probe_report(const std::string& path, const std::function<void()>& read) {
    const rlim_t cap = virtual_size() + kHeadroom;
    // HDF5 can also loop for ever on a damaged heap: a read gets 5 s and 1 s per MiB of file
    std::error_code size_error;
    const auto bytes = std::filesystem::file_size(path, size_error);
    const unsigned seconds = kBaseSeconds + (size_error ? 0u : static_cast<unsigned>(bytes >> 20));
    const pid_t pid = fork();
    if (pid < 0) return;  // no child to spare: the real read goes ahead unprotected
    if (pid == 0) {
        const rlimit limit{cap, cap};
        setrlimit(RLIMIT_AS, &limit);
        alarm(seconds);
        try {
            read();
        } catch (const std::bad_alloc&) {
            _exit(kOutOfMemory);
        } catch (...) {
            // the parent's own read reports it, with its message
        }
        _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string damaged = path + ": error: the report is damaged: ";
    const std::string note =
        "\nnote: run the scenarios again to write a new one (lav run --resume cannot continue it)";
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        throw ReportError(damaged + "reading it did not finish in " + std::to_string(seconds) +
                          " s" + note);
    if (WIFSIGNALED(status))
        throw ReportError(damaged + "reading it crashed the HDF5 library (signal " +
                          std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) +
                          ")" + note);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemory)
        throw ReportError(damaged + "reading it asks for more than 1 GiB of memory" + note);
    // the child catches every exception: any other exit is a runtime's own abort (a sanitizer's)
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        throw ReportError(damaged + "reading it failed inside the HDF5 library (exit " +
                          std::to_string(WEXITSTATUS(status)) + ")" + note);
}

}  // namespace lav::report
