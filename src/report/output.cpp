// src/report/output.cpp — the lock on a report's path, temporary names, and their removal on
// signals.
#include "report/output.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/regular_file.h"

namespace lav::report {
namespace {

namespace fs = std::filesystem;

// ---- temporaries removed on SIGINT, SIGTERM and SIGHUP ----

// a signal handler may only touch memory that is always valid: fixed slots, no allocation
constexpr size_t kSlots = 16;
constexpr size_t kPathBytes = 4096;
struct Slot {
    std::atomic<bool> used{false};
    std::atomic<bool> active{false};
    // a child forked to run a case inherits the slots, and must not remove its parent's files
    std::atomic<pid_t> owner{0};
    char path[kPathBytes];
};
std::array<Slot, kSlots> slots;

extern "C" void remove_temporaries_and_die(int signal) {
    const pid_t self = ::getpid();
    for (Slot& slot : slots)
        if (slot.active.load() && slot.owner.load() == self) ::unlink(slot.path);
    // die of the same signal, so that the parent sees how the run ended
    ::signal(signal, SIG_DFL);
    ::raise(signal);
}

void install_handlers() {
    static const bool kInstalled = [] {
        for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction current {};
            // a handler someone else installed (an embedded interpreter's) stays
            if (::sigaction(signal, nullptr, &current) != 0 || current.sa_handler != SIG_DFL)
                continue;
            struct sigaction action {};
            action.sa_handler = remove_temporaries_and_die;
            sigemptyset(&action.sa_mask);
            ::sigaction(signal, &action, nullptr);
        }
        return true;
    }();
    (void)kInstalled;
}

/// A free slot holding `path`, or -1 when all are taken or the path is too long (the file is
/// then removed by its destructor only).
int register_path(const std::string& path) {
    install_handlers();
    if (path.size() >= kPathBytes) return -1;
    for (size_t i = 0; i < kSlots; ++i) {
        bool expected = false;
        if (!slots[i].used.compare_exchange_strong(expected, true)) continue;
        std::memcpy(slots[i].path, path.c_str(), path.size() + 1);
        slots[i].owner.store(::getpid());
        slots[i].active.store(true);
        return static_cast<int>(i);
    }
    return -1;
}

void unregister_path(int slot) {
    if (slot < 0) return;
    slots[static_cast<size_t>(slot)].active.store(false);
    slots[static_cast<size_t>(slot)].used.store(false);
}

// ---- the lock ----

[[noreturn]] void lock_failed(const std::string& path, const std::string& lock_path,
                              const char* action) {
    throw ReportError(path + ": error: cannot " + action + " the lock file " + lock_path + ": " +
                          std::strerror(errno) +
                          "\nnote: reports go to a folder lav can create and write, on a file "
                          "system with flock",
                      ExitCode::kEnvironment);
}

/// The pid the holder wrote into the lock file, or "unknown" before it wrote one.
std::string holder_pid(int fd) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    std::string pid(text, n > 0 ? static_cast<size_t>(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return pid.empty() ? "unknown" : pid;
}

bool same_file(int fd, const std::string& path) {
    struct stat open_file {
    }, named{};
    return ::fstat(fd, &open_file) == 0 && ::stat(path.c_str(), &named) == 0 &&
           open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

/// The pid at the start of a temporary name's tail "<pid>.<random>.<suffix>", or 0.
pid_t pid_of_tail(const std::string& tail) {
    const size_t dot = tail.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 10) return 0;
    pid_t pid = 0;
    for (size_t i = 0; i < dot; ++i) {
        if (tail[i] < '0' || tail[i] > '9') return 0;
        pid = pid * 10 + (tail[i] - '0');
    }
    const size_t random_end = tail.find('.', dot + 1);
    if (random_end != dot + 1 + 8) return 0;
    for (size_t i = dot + 1; i < random_end; ++i)
        if (!std::isxdigit(static_cast<unsigned char>(tail[i]))) return 0;
    return pid;
}

}  // namespace

void check_output_path(const std::string& path) {
    if (const auto kind = non_regular_kind(path))
        throw UsageError(path + " is " + *kind +
                         ": a report replaces the file it is written to, so it goes to a regular "
                         "file or a new name");
}

OutputLock::OutputLock(const std::string& path) : lock_path_(path + ".lock") {
    check_output_path(path);
    std::error_code error;
    const fs::path folder = fs::path(path).parent_path();
    if (!folder.empty()) fs::create_directories(folder, error);
    // the file locked must still be the one named: a holder removes the name as it lets go
    for (;;) {
        fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) lock_failed(path, lock_path_, "create");
        if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            const int reason = errno;
            const std::string holder = holder_pid(fd_);
            ::close(fd_);
            errno = reason;
            if (reason != EWOULDBLOCK) lock_failed(path, lock_path_, "take");
            throw ReportError(path + ": error: another lav (pid " + holder +
                                  ") is writing this report (it holds " + lock_path_ +
                                  ")\nnote: wait until it ends, or give this run another --out",
                              ExitCode::kEnvironment);
        }
        if (same_file(fd_, lock_path_)) break;
        ::close(fd_);
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0)
        lock_failed(path, lock_path_, "write");
}

OutputLock::~OutputLock() {
    // the name goes first, while the lock still keeps others from taking the file it names
    ::unlink(lock_path_.c_str());
    ::close(fd_);
}

std::string temporary_name(const std::string& path, const std::string& suffix) {
    static std::mt19937 random{std::random_device{}()};
    char tail[64];
    std::snprintf(tail, sizeof tail, ".%d.%08x.", static_cast<int>(::getpid()),
                  static_cast<unsigned>(random()));
    return path + tail + suffix;
}

std::vector<std::string> stale_temporaries(const std::string& path) {
    const fs::path folder = fs::path(path).parent_path();
    const std::string prefix = fs::path(path).filename().string() + ".";
    std::vector<std::string> stale;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(folder.empty() ? "." : folder, error)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        const pid_t pid = pid_of_tail(name.substr(prefix.size()));
        if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
            stale.push_back(entry.path().string());
    }
    return stale;
}

TemporaryFile::TemporaryFile(std::string path)
    : path_(std::move(path)), slot_(register_path(path_)) {}

TemporaryFile::~TemporaryFile() {
    if (path_.empty()) return;
    ::unlink(path_.c_str());
    unregister_path(slot_);
}

void TemporaryFile::release() {
    unregister_path(slot_);
    slot_ = -1;
    path_.clear();
}

}  // namespace lav::report
