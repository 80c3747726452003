// src/cli/progress.cpp — lav run's progress lines and the ETA they carry.
#include "cli/progress.h"

#include <cstdio>

namespace lav::cli {
namespace {

// a stage running this long gets a line saying so, and another this often after that
constexpr double kStageNoteSeconds = 10.0;

}  // namespace

Progress::Progress(std::ostream& out, bool enabled, double after_seconds, size_t records,
                   double total_cost)
    : out_(out),
      enabled_(enabled),
      after_(after_seconds),
      records_(records),
      total_cost_(total_cost) {
    if (enabled_) watcher_ = std::thread([this] { watch(); });
}

Progress::~Progress() {
    if (!watcher_.joinable()) return;
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    watcher_.join();
}

double Progress::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::rough(double seconds) {
    char buf[32];
    if (seconds < 90)
        std::snprintf(buf, sizeof buf, "~%.0f s", seconds);
    else if (seconds < 90 * 60)
        std::snprintf(buf, sizeof buf, "~%.0f min", seconds / 60);
    else
        std::snprintf(buf, sizeof buf, "~%.1f h", seconds / 3600);
    return buf;
}

std::string Progress::eta() const {
    if (cost_done_ <= 0 || total_cost_ <= cost_done_) return "";
    return "ETA " + rough(elapsed() / cost_done_ * (total_cost_ - cost_done_));
}

void Progress::start_case(const std::string& id, double cost, size_t stages) {
    const std::lock_guard<std::mutex> lock(mutex_);
    case_ = id;
    case_cost_ = cost;
    stages_ = stages > 0 ? stages : 1;
    stages_done_ = 0;
    stage_.clear();
}

void Progress::stage(const std::string& stage) {
    const std::lock_guard<std::mutex> lock(mutex_);
    // the stage before this one is done
    if (!stage_.empty() && stages_done_ + 1 < stages_) {
        ++stages_done_;
        cost_done_ += case_cost_ / static_cast<double>(stages_);
    }
    stage_ = stage;
    stage_started_ = last_note_ = elapsed();
}

void Progress::record(const std::string& id, const std::string& verdict) {
    const std::lock_guard<std::mutex> lock(mutex_);
    finish_case();  // a case hands out its records once its last kernel has run
    ++done_;
    const double now = elapsed();
    if (!enabled_ || now < after_) return;
    const std::string eta_text = eta();
    out_ << "[" << done_ << "/" << records_ << "] " << id << "  " << verdict << "  ("
         << static_cast<long>(now) << " s" << (eta_text.empty() ? "" : ", " + eta_text) << ")\n"
         << std::flush;
}

void Progress::end_case() {
    const std::lock_guard<std::mutex> lock(mutex_);
    finish_case();
}

void Progress::finish_case() {
    cost_done_ +=
        case_cost_ * static_cast<double>(stages_ - stages_done_) / static_cast<double>(stages_);
    stages_done_ = stages_;
    stage_.clear();
}

void Progress::watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
        const double now = elapsed();
        if (stage_.empty() || now < after_ || now - last_note_ < kStageNoteSeconds) continue;
        last_note_ = now;
        const std::string eta_text = eta();
        out_ << "  " << case_ << ": "
             << (stage_ == "reference" ? "fp64 reference" : stage_.substr(case_.size() + 1))
             << " running for " << static_cast<long>(now - stage_started_) << " s (stage "
             << stages_done_ + 1 << " of " << stages_ << "; " << static_cast<long>(now)
             << " s into the run" << (eta_text.empty() ? "" : ", " + eta_text) << ")\n"
             << std::flush;
    }
}

}  // namespace lav::cli
