// tests/fuzz/runner.h — runs one input through a target in this process and says what happened;
// saves the inputs that make findings, even those that crash the process or never return.
//
//   watch_for_crashes("findings");
//   const Result r = run_input(fuzz_scenario, input, std::chrono::milliseconds(1000));
//   if (is_finding(r.outcome)) std::cout << save_finding("findings", r.outcome, input);
#pragma once

#include <chrono>
#include <string>

#include "targets.h"

namespace lav::fuzz {

enum class Outcome {
    accepted,        ///< the target returned 0
    refused,         ///< lav refused the input with a user-facing error
    internal_error,  ///< an InternalError (exit 4 in lav): a finding
    exception,       ///< any other exception: a finding
    hang,            ///< the call took longer than the timeout: a finding
    crash,           ///< a forked call ended by a signal: a finding
};

/// "accepted", "refused", "internal-error", ..., "crash": also the prefix of saved files.
const char* outcome_name(Outcome outcome);
bool is_finding(Outcome outcome);

struct Result {
    Outcome outcome = Outcome::accepted;
    std::string message;  ///< the exception's what(); for a hang, how long it took
};

/// Runs `input` through `target`. A call that returns after more than `timeout` is a hang; one
/// that has not returned after ten times as long (at least a second) is saved by the
/// watch_for_crashes() watchdog, which then ends the process.
Result run_input(TargetFn target, const std::string& input, std::chrono::duration<double> timeout);

/// run_input in a child process, so that a crash ends the child only and becomes a finding.
Result run_input_forked(TargetFn target, const std::string& input,
                        std::chrono::duration<double> timeout);

/// From now on a crash (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) or a call that never returns
/// saves the input being run in `folder` as crash-<hash> or hang-<hash> and ends the process
/// (a hang with SIGKILL to its whole process group when it leads one, as a forked call does, or
/// with the exit status int(Outcome::hang); run_input_forked reads either as a hang).
void watch_for_crashes(const std::string& folder);

/// Writes `input` to `folder`/<outcome>-<hash of input> and returns that path.
std::string save_finding(const std::string& folder, Outcome outcome, const std::string& input);

}  // namespace lav::fuzz
