// src/report/output.h — where a report is written: one writer at a time, never onto a device or a
// FIFO, through temporary files of its own that do not outlive the process.
//
//   const OutputLock lock("run.h5");  // run.h5.lock holds this pid while the run writes
//   for (const auto& stale : stale_temporaries("run.h5")) warn(stale);
//   TemporaryFile temporary(temporary_name("run.h5", "tmp"));  // run.h5.<pid>.<random>.tmp
#pragma once

#include <string>
#include <vector>

namespace lav::report {

/// Refuses (UsageError, exit 2) a `path` that exists and is not a regular file (links followed):
/// replacing a device or a FIFO with a report would destroy it.
void check_output_path(const std::string& path);

/// An advisory lock (flock) on "<path>.lock", a file that holds the owner's pid, for as long as
/// the object lives: two runs writing one report would replace each other's files. Creates the
/// folder of `path` if missing. Throws ReportError (exit 3) naming the owner's pid when another
/// process holds it, and check_output_path's error first.
class OutputLock {
  public:
    explicit OutputLock(const std::string& path);
    ~OutputLock();
    OutputLock(const OutputLock&) = delete;
    OutputLock& operator=(const OutputLock&) = delete;

  private:
    std::string lock_path_;
    int fd_ = -1;
};

/// A name beside `path` no other process uses: "<path>.<pid>.<random hex>.<suffix>".
std::string temporary_name(const std::string& path, const std::string& suffix);

/// Temporary files beside `path` (named as temporary_name makes them) whose process is no
/// longer running: what a killed run left behind.
std::vector<std::string> stale_temporaries(const std::string& path);

/// Owns a temporary file's name: removes the file when destroyed and, should the process end by
/// SIGINT, SIGTERM or SIGHUP first, from the signal handler. SIGKILL leaves it, for
/// stale_temporaries to find.
class TemporaryFile {
  public:
    explicit TemporaryFile(std::string path);
    ~TemporaryFile();
    TemporaryFile(const TemporaryFile&) = delete;
    TemporaryFile& operator=(const TemporaryFile&) = delete;

    const std::string& path() const { return path_; }
    /// The file was renamed into place: nothing is left to remove.
    void release();

  private:
    std::string path_;
    int slot_ = -1;
};

}  // namespace lav::report
