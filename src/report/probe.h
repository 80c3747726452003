// src/report/probe.h — a first read of a report in a child process: HDF5 itself crashes or
// exhausts memory on some damaged files, and that must cost an error message, not lav.
#pragma once

#include <functional>
#include <string>

namespace lav::report {

/// Runs `read` (a full read of the report at `path`) in a child process whose memory is capped
/// at 1 GiB above what it starts with and whose time at 5 s plus 1 s per MiB of file. Throws
/// ReportError (exit 2) naming `path` when the child dies of a signal, runs out of memory or
/// time, or exits abnormally; anything else (success, or an error the real read will report
/// itself) returns.
void probe_report(const std::string& path, const std::function<void()>& read);

}  // namespace lav::report
