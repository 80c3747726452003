// tests/fuzz/runner.cpp — one input through a target, and the signal handlers that save the
// input a crash or a hang interrupted.
#include "runner.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <typeinfo>

namespace lav::fuzz {
namespace {

constexpr int kCrashSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};

// What the signal handlers save: the folder, set once, and the input of the call under way.
std::string g_folder;
const std::string* volatile g_input = nullptr;
bool g_watching = false;

uint64_t fnv1a(const std::string& bytes) {
    uint64_t hash = 0xcbf29ce484222325;
    for (const char c : bytes) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001b3;
    return hash;
}

/// "<folder>/<prefix>-<16 hex digits>" into `out`, by hand: a signal handler calls it too.
void finding_path(char (&out)[4096], const char* folder, const char* prefix, uint64_t hash) {
    size_t n = 0;
    const auto put = [&](const char* s) {
        for (; *s && n + 1 < sizeof out; ++s) out[n++] = *s;
    };
    put(folder);
    put("/");
    put(prefix);
    put("-");
    char hex[17] = {};
    for (int i = 15; i >= 0; --i, hash >>= 4) hex[i] = "0123456789abcdef"[hash & 0xf];
    put(hex);
    out[n] = '\0';
}

void write_all(int fd, const char* data, size_t size) {
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n <= 0) return;
        data += n;
        size -= static_cast<size_t>(n);
    }
}

/// In a signal handler: saves the input under way and says where on stderr.
void save_interrupted(const char* prefix) {
    const std::string* input = g_input;
    if (!input) return;
    char path[4096];
    finding_path(path, g_folder.c_str(), prefix, fnv1a(*input));
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        write_all(fd, input->data(), input->size());
        ::close(fd);
    }
    const char* lines[] = {"\nlav_fuzz: ", prefix, ": the input is saved as ", path, "\n"};
    for (const char* line : lines) write_all(STDERR_FILENO, line, std::strlen(line));
}

void on_crash(int signal) {
    save_interrupted("crash");
    ::signal(signal, SIG_DFL);
    ::raise(signal);
}

void on_alarm(int) {
    save_interrupted("hang");
    // the leader of a process group takes it along: children lav forked (it reads a report in
    // a child first) would otherwise outlive it, still hung
    if (::getpgrp() == ::getpid()) ::kill(0, SIGKILL);
    ::_exit(static_cast<int>(Outcome::hang));
}

std::string type_name(const std::type_info& type) {
    int status = 0;
    const std::unique_ptr<char, decltype(&std::free)> name(
        abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), &std::free);
    return status == 0 ? name.get() : type.name();
}

}  // namespace

const char* outcome_name(Outcome outcome) {
    switch (outcome) {
        case Outcome::accepted:
            return "accepted";
        case Outcome::refused:
            return "refused";
        case Outcome::internal_error:
            return "internal-error";
        case Outcome::exception:
            return "exception";
        case Outcome::hang:
            return "hang";
        case Outcome::crash:
            return "crash";
    }
    return "?";
}

bool is_finding(Outcome outcome) {
    return outcome != Outcome::accepted && outcome != Outcome::refused;
}

Result run_input(TargetFn target, const std::string& input, std::chrono::duration<double> timeout) {
    if (g_watching) ::alarm(static_cast<unsigned>(std::max(1.0, std::ceil(10 * timeout.count()))));
    g_input = &input;
    const auto start = std::chrono::steady_clock::now();
    Result result;
    try {
        const auto* data = reinterpret_cast<const uint8_t*>(input.data());
        result.outcome = target(data, input.size()) == 0 ? Outcome::accepted : Outcome::refused;
    } catch (const InternalError& e) {
        result = {Outcome::internal_error, e.what()};
    } catch (const std::exception& e) {
        result = {Outcome::exception, type_name(typeid(e)) + ": " + e.what()};
    } catch (...) {
        result = {Outcome::exception, "an exception that is not a std::exception"};
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    g_input = nullptr;
    if (g_watching) ::alarm(0);
    if (took > timeout && !is_finding(result.outcome)) {
        result = {Outcome::hang, "took " + std::to_string(took.count()) + " s, more than " +
                                     std::to_string(timeout.count()) + " s"};
    }
    return result;
}

Result run_input_forked(TargetFn target, const std::string& input,
                        std::chrono::duration<double> timeout) {
    int message_pipe[2];
    if (::pipe(message_pipe) != 0) throw std::runtime_error("cannot make a pipe");
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("cannot fork");
    if (child == 0) {
        // the parent saves and tells of a crash; the watchdog stays, and ends the group
        for (const int signal : kCrashSignals) ::signal(signal, SIG_DFL);
        ::setpgid(0, 0);
        ::close(message_pipe[0]);
        const Result result = run_input(target, input, timeout);
        write_all(message_pipe[1], result.message.data(), result.message.size());
        ::_exit(static_cast<int>(result.outcome));
    }
    ::close(message_pipe[1]);
    Result result;
    char buffer[4096];
    for (ssize_t n; (n = ::read(message_pipe[0], buffer, sizeof buffer)) > 0;)
        result.message.append(buffer, static_cast<size_t>(n));
    ::close(message_pipe[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        result = {Outcome::hang, "still running when the watchdog ended it"};
    } else if (WIFSIGNALED(status)) {
        result = {Outcome::crash, std::string("killed by signal ") + ::strsignal(WTERMSIG(status))};
    } else {
        result.outcome = static_cast<Outcome>(WEXITSTATUS(status));
    }
    return result;
}

void watch_for_crashes(const std::string& folder) {
    std::filesystem::create_directories(folder);
    g_folder = folder;
    // a stack of their own, so that the handlers run after a stack overflow too
    static char stack[1 << 16];
    stack_t alternate{};
    alternate.ss_sp = stack;
    alternate.ss_size = sizeof stack;
    ::sigaltstack(&alternate, nullptr);
    struct sigaction action {};
    action.sa_flags = SA_ONSTACK;
    action.sa_handler = on_crash;
    for (const int signal : kCrashSignals) ::sigaction(signal, &action, nullptr);
    action.sa_handler = on_alarm;
    ::sigaction(SIGALRM, &action, nullptr);
    g_watching = true;
}

std::string save_finding(const std::string& folder, Outcome outcome, const std::string& input) {
    std::filesystem::create_directories(folder);
    char path[4096];
    finding_path(path, folder.c_str(), outcome_name(outcome), fnv1a(input));
    std::ofstream(path, std::ios::binary) << input;
    return path;
}

}  // namespace lav::fuzz
