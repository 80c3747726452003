// tests/fuzz/driver_test.cpp — lav_fuzz's parts: seeded mutations, dictionaries, what counts as
// a finding, and targets that accept the corpus's valid inputs and refuse garbage.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "mutator.h"
#include "report/report.h"
#include "runner.h"

namespace lav::fuzz {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> mutations(uint64_t seed, size_t count, size_t max_size = 1 << 16) {
    Mutator mutator(seed, {"ops", "[prologue]"}, max_size);
    std::vector<std::string> out;
    std::string input = "name = \"x\"\nfamily = \"gla\"\n";
    for (size_t i = 0; i < count; ++i)
        out.push_back(input = mutator.mutate(input, "[shape]\nB = 1"));
    return out;
}

TEST(FuzzMutator, IsTheSameForTheSameSeed) {
    EXPECT_EQ(mutations(7, 200), mutations(7, 200));
    EXPECT_NE(mutations(7, 200), mutations(8, 200));
}

TEST(FuzzMutator, KeepsWithinTheLargestSize) {
    for (const std::string& input : mutations(3, 2000, 40)) EXPECT_LE(input.size(), 40u);
}

TEST(FuzzMutator, InsertsDictionaryTokensAndSplices) {
    const std::vector<std::string> inputs = mutations(5, 2000);
    const auto any_has = [&](const std::string& part) {
        return std::any_of(inputs.begin(), inputs.end(),
                           [&](const std::string& s) { return s.find(part) != std::string::npos; });
    };
    EXPECT_TRUE(any_has("[prologue]"));
    EXPECT_TRUE(any_has("B = 1"));
}

TEST(FuzzDictionary, ReadsLibFuzzerFormat) {
    const std::string path = testing::TempDir() + "fuzz_test.dict";
    std::ofstream(path) << "# a comment\n\nkw_ops=\"ops\"\n\"a\\\"b\\\\c\"\n\"\\x00\\x41\"\n";
    EXPECT_EQ(read_dictionary(path),
              (std::vector<std::string>{"ops", "a\"b\\c", std::string("\0A", 2)}));
    std::ofstream(path) << "unquoted\n";
    EXPECT_THROW(read_dictionary(path), std::runtime_error);
}

// planted targets, each through expect_user_errors as the real ones go
int accepts(const uint8_t*, size_t) {
    return expect_user_errors([] {});
}
int refuses(const uint8_t*, size_t) {
    return expect_user_errors([] { throw ScenarioError("file:1:1: error: refused"); });
}
int asserts(const uint8_t*, size_t) {
    return expect_user_errors([] { LAV_ASSERT(false, "planted"); });
}
int throws_std(const uint8_t*, size_t) {
    return expect_user_errors([] { return std::string().at(1); });
}
int aborts(const uint8_t*, size_t) { std::abort(); }
int sleeps(const uint8_t*, size_t) {
    std::this_thread::sleep_for(milliseconds(50));
    return 0;
}

TEST(FuzzRunner, TellsFindingsFromRefusals) {
    EXPECT_EQ(run_input(accepts, "x", milliseconds(1000)).outcome, Outcome::accepted);
    EXPECT_EQ(run_input(refuses, "x", milliseconds(1000)).outcome, Outcome::refused);
    const Result internal = run_input(asserts, "x", milliseconds(1000));
    EXPECT_EQ(internal.outcome, Outcome::internal_error);
    EXPECT_NE(internal.message.find("planted (internal error at "), std::string::npos);
    const Result other = run_input(throws_std, "x", milliseconds(1000));
    EXPECT_EQ(other.outcome, Outcome::exception);
    EXPECT_EQ(other.message.rfind("std::out_of_range: ", 0), 0u) << other.message;
    EXPECT_EQ(run_input(sleeps, "x", milliseconds(10)).outcome, Outcome::hang);
    for (const Outcome o : {Outcome::accepted, Outcome::refused}) EXPECT_FALSE(is_finding(o));
    for (const Outcome o :
         {Outcome::internal_error, Outcome::exception, Outcome::hang, Outcome::crash})
        EXPECT_TRUE(is_finding(o));
}

TEST(FuzzRunner, CountsACrashOfAForkedCall) {
    EXPECT_EQ(run_input_forked(accepts, "x", milliseconds(1000)).outcome, Outcome::accepted);
    EXPECT_EQ(run_input_forked(refuses, "x", milliseconds(1000)).outcome, Outcome::refused);
    const Result internal = run_input_forked(asserts, "x", milliseconds(1000));
    EXPECT_EQ(internal.outcome, Outcome::internal_error);
    EXPECT_NE(internal.message.find("planted"), std::string::npos);
    const Result crash = run_input_forked(aborts, "x", milliseconds(1000));
    EXPECT_EQ(crash.outcome, Outcome::crash);
    EXPECT_EQ(crash.message, "killed by signal Aborted");
}

TEST(FuzzRunner, SavesFindingsUnderTheirOutcomeAndHash) {
    const std::string folder = testing::TempDir() + "fuzz_findings";
    const std::string path = save_finding(folder, Outcome::hang, "slow input");
    EXPECT_EQ(path.rfind(folder + "/hang-", 0), 0u) << path;
    EXPECT_EQ(path, save_finding(folder, Outcome::hang, "slow input"));
    std::ifstream in(path);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "slow input");
}

int run_file(TargetFn target, const std::string& relative) {
    std::ifstream in(std::string(LAV_SOURCE_DIR) + "/tests/fuzz/" + relative, std::ios::binary);
    EXPECT_TRUE(in) << relative;
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    return target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

int run_text(TargetFn target, const std::string& text) {
    return target(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

TEST(FuzzTargets, AcceptValidInputsAndRefuseGarbage) {
    EXPECT_EQ(run_file(fuzz_scenario, "corpus/scenario/minimal.toml"), 0);
    EXPECT_EQ(run_text(fuzz_scenario, "[[shape"), -1);
    EXPECT_EQ(run_text(fuzz_prologue, "k = addcmul(k, k * (a - 1.0), k_a)\n"), 0);
    EXPECT_EQ(run_text(fuzz_prologue, "k = addcmul(k,"), -1);
    // a report as lav writes one (the report corpus is written at test time)
    report::Report written;
    written.complete = true;
    const std::string file = ::testing::TempDir() + "fuzz_driver_sample.h5";
    report::write_report(file, written);
    std::ifstream report_in(file, std::ios::binary);
    const std::string report_bytes(std::istreambuf_iterator<char>(report_in), {});
    EXPECT_EQ(run_text(fuzz_report, report_bytes), 0);
    EXPECT_EQ(run_text(fuzz_report, "\x89HDF\r\n\x1a\n"), -1);
}

}  // namespace
}  // namespace lav::fuzz
