// src/cli/progress.h — what lav run prints while it runs: a line per record, and inside a long
// case its stage (the reference, each variant) every so often, each with the run's ETA.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace lav::cli {

class Progress {
  public:
    /// Prints to `out` once the run has taken `after_seconds` (0: from the first record), or
    /// never when not `enabled`. `total_cost` is the estimated cost of every case to run (the
    /// unit is the caller's: lav run uses estimated bytes times the case's stages).
    Progress(std::ostream& out, bool enabled, double after_seconds, size_t records,
             double total_cost);
    /// Stops the thread that reports a stage still running.
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    /// A case of estimated `cost` starts; it has `stages` steps (its reference and its records).
    void start_case(const std::string& id, double cost, size_t stages);
    /// The case moves on to `stage` ("reference" or a record id).
    void stage(const std::string& stage);
    /// A record is done: "[3/40] <id>  pass  (12 s, ETA ~2 min)".
    void record(const std::string& id, const std::string& verdict);
    /// The case is done: its whole cost counts as run.
    void end_case();

    /// "~45 s", "~3 min", "~1.2 h": a duration as the ETA shows it.
    static std::string rough(double seconds);

  private:
    double elapsed() const;
    /// "ETA ~2 min", from the time per unit of estimated cost so far; "" before anything ran
    std::string eta() const;
    void watch();
    /// counts the rest of the current case's cost as run (the caller holds `mutex_`)
    void finish_case();

    std::ostream& out_;
    const bool enabled_;
    const double after_;
    const size_t records_;
    const double total_cost_;
    const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    mutable std::mutex mutex_;  // everything below, and `out_`
    std::condition_variable wake_;
    bool stopping_ = false;
    size_t done_ = 0;
    double cost_done_ = 0;  ///< the finished cases', and the current case's finished stages'
    std::string case_, stage_;
    double case_cost_ = 0;
    size_t stages_ = 1, stages_done_ = 0;
    double stage_started_ = 0, last_note_ = 0;
    std::thread watcher_;
};

}  // namespace lav::cli
