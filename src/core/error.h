// src/core/error.h — lav's error types, exit codes, LAV_CHECK (input errors) and LAV_ASSERT (our bugs).
//
// Input errors (bad CLI arguments, scenario files, shapes) throw an Error subclass through
// LAV_CHECK, which never exits; only main() turns an Error into an exit code. Broken
// invariants use LAV_ASSERT, whose message ends in "internal error at <file>:<line> — please
// report" so that a bug never looks like a user mistake.
//
//   LAV_CHECK(B > 0, "B must be positive, got ", B);
//   LAV_ASSERT(out.defined(), "kernel returned no output");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lav {

/// The process exit codes documented in README.md.
enum class ExitCode : int {
    kPass = 0,
    kVerificationFailed = 1,
    kUsage = 2,
    kEnvironment = 3,
    kInternal = 4,
};

/// Base of every error lav reports to the user; carries the exit code it maps to.
class Error : public std::runtime_error {
public:
    Error(const std::string& what, ExitCode code) : std::runtime_error(what), code_(code) {}
    ExitCode exit_code() const { return code_; }

private:
    ExitCode code_;
};

/// Bad command-line use.
class UsageError : public Error {
public:
    explicit UsageError(const std::string& what) : Error(what, ExitCode::kUsage) {}
};

/// A scenario file that cannot be run; the message is already rendered with file:line:col.
class ScenarioError : public Error {
public:
    explicit ScenarioError(const std::string& what) : Error(what, ExitCode::kUsage) {}
};

/// Shapes or layouts that a kernel or reference cannot take.
class ShapeError : public Error {
public:
    explicit ShapeError(const std::string& what) : Error(what, ExitCode::kUsage) {}
};

/// Something this machine lacks: a GPU, a backend, a writable output folder.
class EnvironmentError : public Error {
public:
    explicit EnvironmentError(const std::string& what) : Error(what, ExitCode::kEnvironment) {}
};

/// A report file that cannot be read or written; names the file and the object path.
class ReportError : public Error {
public:
    ReportError(const std::string& what, ExitCode code = ExitCode::kUsage) : Error(what, code) {}
};

/// A broken invariant inside lav.
class InternalError : public Error {
public:
    explicit InternalError(const std::string& what) : Error(what, ExitCode::kInternal) {}
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
}
}  // namespace detail

}  // namespace lav

/// Throws `ErrorType` with the concatenated message unless `cond` holds.
#define LAV_CHECK_AS(ErrorType, cond, ...)                            \
    do {                                                              \
        if (!(cond)) throw ErrorType(::lav::detail::str_cat(__VA_ARGS__)); \
    } while (0)

/// Throws ShapeError (exit 2) unless `cond` holds: an input lav cannot take.
#define LAV_CHECK(cond, ...) LAV_CHECK_AS(::lav::ShapeError, cond, __VA_ARGS__)

/// Throws InternalError unless `cond` holds: a bug in lav, never the user's input.
#define LAV_ASSERT(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond))                                                                   \
            throw ::lav::InternalError(::lav::detail::str_cat(                         \
                "", ##__VA_ARGS__, " (internal error at ", __FILE__, ":", __LINE__,    \
                " — please report)"));                                                 \
    } while (0)
