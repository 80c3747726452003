// tests/cli/progress_test.cpp — lav run's progress lines: a line per record with the run's ETA
// from the time per unit of estimated work, none before any work is done or once all of it is,
// nothing before the delay, nothing at all when disabled, and rough durations.
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace lav::cli {
namespace {

TEST(Progress, RecordLinesCarryTheEtaOfTheWorkLeft) {
    std::ostringstream out;
    {
        // two cases, the second three times the first's estimated work
        Progress progress(out, true, 0.0, 2, 4.0);
        progress.start_case("a", 1.0, 2);
        progress.stage("reference");
        progress.stage("a/chunk/cpu/fwd");
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        progress.record("a/chunk/cpu/fwd", "pass");
        progress.end_case();
        progress.start_case("b", 3.0, 2);
        progress.stage("reference");
        progress.record("b/chunk/cpu/fwd", "fail");
        progress.end_case();
    }
    const std::string text = out.str();
    // after a quarter of the work in about 0.3 s, three quarters are left: about 0.9 s (more on
    // a busy machine, in proportion)
    std::smatch first;
    ASSERT_TRUE(std::regex_search(
        text, first, std::regex(R"(^\[1/2\] a/chunk/cpu/fwd  pass  \((\d+) s, ETA ~(\d+) s\)\n)")))
        << text;
    const int elapsed = std::stoi(first[1]), eta = std::stoi(first[2]);
    EXPECT_GE(eta, 1) << text;
    EXPECT_LE(eta, 3 * elapsed + 3) << text;
    // the last record leaves no work, so no ETA
    EXPECT_TRUE(
        std::regex_search(text, std::regex(R"(\n\[2/2\] b/chunk/cpu/fwd  fail  \(\d+ s\)\n$)")))
        << text;
}

TEST(Progress, QuietBeforeTheDelayAndWhenDisabled) {
    std::ostringstream late, off;
    {
        Progress progress(late, true, 60.0, 1, 1.0);
        progress.start_case("a", 1.0, 1);
        progress.record("a/chunk/cpu/fwd", "pass");
    }
    {
        Progress progress(off, false, 0.0, 1, 1.0);
        progress.start_case("a", 1.0, 1);
        progress.record("a/chunk/cpu/fwd", "pass");
    }
    EXPECT_EQ(late.str(), "");
    EXPECT_EQ(off.str(), "");
}

TEST(Progress, RoughDurations) {
    EXPECT_EQ(Progress::rough(42), "~42 s");
    EXPECT_EQ(Progress::rough(600), "~10 min");
    EXPECT_EQ(Progress::rough(3 * 3600), "~3.0 h");
}

}  // namespace
}  // namespace lav::cli
