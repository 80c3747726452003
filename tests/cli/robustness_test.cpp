// tests/cli/robustness_test.cpp — inputs made to crash, hang or flood lav: each ends at once in
// exit 2 (the input) or 3 (the machine), with a short message naming the limit.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/lav_command.h"
#include "report/report.h"
#include "report/sample_report.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

using test::lav;
using test::Result;
using test::scratch;

// a lav that still runs after this long hangs: it is killed, and the test fails on its exit code
constexpr int kSeconds = 60;

// nine lines; what a test appends starts on line 10
const std::string kHead = R"(name = "robust"
description = "d"
family = "simple_gla"
variants = ["chunk"]
[shape]
B = 1
T = 16
H = 1
K = 16
)";

std::string write(const std::string& name, const std::string& text) {
    const std::string path = scratch(name);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

std::string repeat(const std::string& text, std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < n; ++i) out += text;
    return out;
}

std::string with_ops(const std::string& expr) {
    return kHead + "V = 16\n[prologue]\nops = \"\"\"\nk = " + expr + "\n\"\"\"\n";
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

/// Expects exit `code` from `lav validate` and `lav run` on `file`, each printing `message`.
void expect_refused(const std::string& file, const std::string& message, int code = 2) {
    for (const std::string& command :
         {"validate " + file, "run " + file + " --out " + scratch("refused.h5")}) {
        const Result r = test::lav_within(kSeconds, command);
        EXPECT_EQ(r.code, code) << command << "\n" << r.output.substr(0, 2000);
        EXPECT_TRUE(has(r.output, message)) << command << "\n" << r.output.substr(0, 2000);
    }
}

// The inputs that once overflowed the stack, each refused by the first limit it crosses.
TEST(Robustness, DeepOrLongExpressionsAreErrors) {
    expect_refused(write("parens.toml", with_ops(repeat("(", 2900) + "k" + repeat(")", 2900))),
                   ":13:1005: error: an expression of 5801 tokens, more than 1000");
    expect_refused(write("minus.toml", with_ops(repeat("-", 10000) + "k")),
                   ":13:1005: error: an expression of 10001 tokens, more than 1000");
    std::string sum = "k";
    for (int i = 1; i < 30000; ++i) sum += "+k";
    expect_refused(write("sum.toml", with_ops(sum)),
                   ":13:1: error: line 13 has 60003 bytes, more than the 16384 a line may have");
}

TEST(Robustness, DeepDottedKeysAreErrors) {
    std::string key = "a";
    for (int i = 1; i < 20000; ++i) key += ".a";
    expect_refused(write("dotted.toml", kHead + "V = 16\n" + key + " = 1\n"),
                   ":11:1: error: line 11 has 40003 bytes, more than the 16384 a line may have");
}

TEST(Robustness, LongNamesAndFiltersAreErrors) {
    std::string huge = kHead + "V = 16\n";
    huge.replace(huge.find("robust"), 6, std::string(30000, 'a'));
    const std::string file = write("huge_name.toml", huge);
    for (const char* filter : {".*x", "(a|b)*x"}) {
        const Result r = test::lav_within(
            kSeconds, "run " + file + " --filter '" + filter + "' --out " + scratch("f.h5"));
        EXPECT_EQ(r.code, 2) << r.output.substr(0, 2000);
        EXPECT_TRUE(has(r.output, ":1:1: error: line 1 has 30009 bytes, more than the 16384"))
            << r.output.substr(0, 2000);
    }
    std::string long_name = kHead + "V = 16\n";
    long_name.replace(long_name.find("robust"), 6, std::string(10000, 'a'));
    expect_refused(write("long_name.toml", long_name),
                   ":1:8: error: a name of 10000 characters, more than 128");
    const Result filter = test::lav_within(
        kSeconds, "run scenarios/smoke --filter '" + std::string(5000, 'a') + "' --out /dev/null");
    EXPECT_EQ(filter.code, 2) << filter.output;
    EXPECT_TRUE(has(filter.output, "--filter has 5000 characters, more than 1000"))
        << filter.output;
}

TEST(Robustness, HugeOneLineArrayGivesOneShortError) {
    // 48 MB on one line, each value wrong: once 20 diagnostics each quoting the whole line
    std::string text = kHead + "V = 16\nvariants = [";
    const std::string item = "\"chunkx\",";
    text.reserve(text.size() + 48000000);
    while (text.size() < 48000000) text += item;
    text += "]\n";
    const std::string file = write("huge_array.toml", text);
    text.clear();
    const Result r = test::lav_within(kSeconds, "validate " + file);
    EXPECT_EQ(r.code, 2) << r.output.substr(0, 2000);
    EXPECT_TRUE(has(r.output, "bytes, more than the 1048576 a scenario file may have"))
        << r.output.substr(0, 2000);
    EXPECT_LT(r.output.size(), 1000u);
    fs::remove(file);
}

TEST(Robustness, FifosAndDevicesAreRefusedBeforeAnyRead) {
    const std::string fifo = scratch("fifo.toml");
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    for (const std::string& path : {fifo, std::string("/dev/zero")}) {
        const std::string kind = path == fifo ? " is a FIFO" : " is a character device";
        expect_refused(path, path + kind + ", not a regular file");
    }
    for (const std::string& command :
         {"show " + fifo, "diff " + fifo + " " + fifo, "gate " + fifo + " --baseline " + fifo}) {
        const Result r = test::lav_within(kSeconds, command);
        EXPECT_EQ(r.code, 2) << command << "\n" << r.output;
        EXPECT_TRUE(has(r.output, fifo + " is a FIFO, not a report")) << command << r.output;
    }
}

TEST(Robustness, ThreadsAreChecked) {
    for (const char* threads : {"100000", "-1", "0"}) {
        const Result r = test::lav_within(
            kSeconds, std::string("run scenarios/smoke --out /dev/null --threads=") + threads);
        EXPECT_EQ(r.code, 2) << threads << "\n" << r.output;
        EXPECT_TRUE(has(r.output, "--threads takes 1 to ")) << threads << "\n" << r.output;
    }
}

TEST(Robustness, MaxMemoryTakesOnlyWholeSizes) {
    const std::vector<std::string> sizes = {
        "0.5", std::string(400, '9'), "1023K", "8GiB", "-1", "0", "M"};
    for (const std::string& size : sizes) {
        const Result r =
            test::lav_within(kSeconds, "validate scenarios/smoke --max-memory='" + size + "'");
        EXPECT_EQ(r.code, 2) << size << "\n" << r.output;
        EXPECT_TRUE(has(r.output, "write whole digits with an optional K, M, G or T"))
            << size << "\n"
            << r.output;
    }
    for (const char* size : {"8G", "8g", "8388608K", "100T"})
        EXPECT_EQ(lav(std::string("validate scenarios/smoke --max-memory ") + size).code, 0)
            << size;
}

TEST(Robustness, PrologueTensorsCountAgainstMaxMemory) {
    // 2^27 elements, drawn in fp64 and rounded: 2 GiB under a 64 MiB limit
    const std::string file = write(
        "prologue_memory.toml", kHead +
                                    "V = 16\n[prologue]\nops = \"k = k + w\"\n"
                                    "tensors.w = { shape = [512, 512, 512], dtype = \"fp32\" }\n");
    const Result r = test::lav_within(kSeconds, "validate " + file + " --max-memory 64M");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "needs about 2.0 GiB, more than --max-memory 64.0 MiB")) << r.output;
}

TEST(Robustness, OutOfMemoryIsAnEnvironmentError) {
    // g alone is 2^45 fp64 values, 256 TiB: past any machine's address space, so the allocation
    // fails at once whatever the kernel's overcommit policy
    std::string text = kHead + "V = 16\n";
    text.replace(text.find("T = 16"), 6, "T = 1073741824");
    text.replace(text.find("H = 1"), 5, "H = 32768");
    const std::string file = write("huge_case.toml", text);
    const Result r = test::lav_within(
        kSeconds, "run " + file + " --max-memory 100000T --out " + scratch("huge.h5"));
    EXPECT_EQ(r.code, 3) << r.output;
    EXPECT_TRUE(has(r.output, "lav: error: out of memory: ")) << r.output;
    EXPECT_TRUE(has(r.output, "you tried to allocate ")) << r.output;
    EXPECT_FALSE(has(r.output, "Exception raised from")) << r.output;
}

TEST(Robustness, ControlCharactersArePrintedEscaped) {
    std::string text = kHead + "V = 16\n";
    text.replace(text.find("\"simple_gla\""), 12, "\"\\u001b]0;owned\\u0007\\u001b[2J\"");
    const Result bad = test::lav_within(kSeconds, "validate " + write("escape.toml", text));
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_TRUE(has(bad.output, "unknown family '\\x1b]0;owned\\x07\\x1b[2J'")) << bad.output;
    EXPECT_FALSE(has(bad.output, "\x1b")) << bad.output;

    report::Report rep;
    rep.complete = true;
    rep.run = report::samples::sample_run();
    rep.run.command_line = "lav run \x1b[2J";
    report::CaseRecord record = report::samples::passing_case();
    record.id = "evil\x1b]0;owned\x07/chunk/cpu/fwd";
    record.verdict = "error";
    record.message =
        "\x1b[31mred\xc2\x9b"
        "2J";
    rep.cases = {record};
    const std::string file = scratch("escape.h5");
    report::write_report(file, rep);
    // the gate names a case missing on one side
    rep.cases = {report::samples::passing_case()};
    const std::string plain = scratch("plain.h5");
    report::write_report(plain, rep);
    for (const std::string& command :
         {"show " + file, "diff " + file + " " + plain, "gate " + plain + " --baseline " + file}) {
        const Result r = test::lav_within(kSeconds, command);
        EXPECT_TRUE(has(r.output, "\\x1b")) << command << "\n" << r.output;
        EXPECT_FALSE(has(r.output, "\x1b")) << command << "\n" << r.output;
        EXPECT_FALSE(has(r.output, "\xc2\x9b")) << command << "\n" << r.output;
    }
}

TEST(Robustness, AFileGivenTwiceRunsOnce) {
    const std::string file = write("twice/once.toml", kHead + "V = 16\n");
    const std::string folder = fs::path(file).parent_path().string();
    const Result validate = lav("validate " + file + " " + folder + " " + folder + "/./once.toml");
    EXPECT_EQ(validate.code, 0) << validate.output;
    EXPECT_EQ(validate.output, "ok  " + file + "  (1 case)\n");
    const std::string out = scratch("twice.h5");
    const Result run = lav("run " + folder + " " + file + " --out " + out);
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_EQ(report::read_report(out).cases.size(), 1u);
}

}  // namespace
}  // namespace lav
