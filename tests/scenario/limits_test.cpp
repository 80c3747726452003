// tests/scenario/limits_test.cpp — files built to exhaust the loader (deep nesting, huge lines,
// FIFOs, devices) get a diagnostic naming the limit; quoted text is bounded and escaped.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "scenario/diagnostics.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kGiB = uint64_t{1} << 30;

Catalog test_catalog() {
    FamilyInfo simple_gla;
    simple_gla.name = "simple_gla";
    simple_gla.variants = {"chunk", "recurrent"};
    simple_gla.inputs = {"q", "k", "v", "g", "g_gamma", "h0"};
    simple_gla.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    simple_gla.options = {{"gate", {"g", "g_gamma", "none"}}};
    return {simple_gla};
}

// nine lines; what a test appends starts on line 10
const std::string kHead = R"(name = "limits"
description = "d"
family = "simple_gla"
[shape]
B = 1
T = 16
H = 1
K = 16
V = 16
)";

std::string repeat(const std::string& text, std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < n; ++i) out += text;
    return out;
}

// a prologue whose ops are the one line `k = <expr>`, on line 12 at column 1
std::string with_ops(const std::string& expr) {
    return kHead + "[prologue]\nops = \"\"\"\nk = " + expr + "\n\"\"\"\n";
}

std::string scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_limits_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return (dir / name).string();
}

std::string write(const std::string& name, const std::string& text) {
    const std::string path = scratch(name);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

/// The what() of the ScenarioError that loading `path` throws; fails the test if none.
std::string load_error(const std::string& path, uint64_t max_memory = 8 * kGiB) {
    LoadOptions options;
    options.max_memory_bytes = max_memory;
    try {
        load_file(path, test_catalog(), options);
    } catch (const ScenarioError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no ScenarioError for " << path;
    return "";
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Each input that once overflowed the stack, refused by the first limit it crosses.
TEST(ScenarioLimits, StackBreakingInputsAreErrors) {
    const std::string parens =
        load_error(write("parens.toml", with_ops(repeat("(", 2900) + "k" + repeat(")", 2900))));
    EXPECT_TRUE(has(parens, ":12:1005: error: an expression of 5801 tokens, more than 1000"))
        << parens.substr(0, 500);
    const std::string minus =
        load_error(write("minus_10k.toml", with_ops(repeat("-", 10000) + "k")));
    EXPECT_TRUE(has(minus, ":12:1005: error: an expression of 10001 tokens, more than 1000"))
        << minus.substr(0, 500);
    std::string sum = "k";
    for (int i = 1; i < 30000; ++i) sum += "+k";
    const std::string terms = load_error(write("sum.toml", with_ops(sum)));
    EXPECT_TRUE(has(terms, ":12:1: error: line 12 has 60003 bytes, more than the 16384"))
        << terms.substr(0, 500);
    for (const std::size_t parts : {20000, 60000}) {
        std::string key = "a";
        for (std::size_t i = 1; i < parts; ++i) key += ".a";
        const std::string dotted = load_error(write("dotted.toml", kHead + key + " = 1\n"));
        EXPECT_TRUE(has(dotted, ":10:1: error: line 10 has " + std::to_string(2 * parts + 3) +
                                    " bytes, more than the 16384"))
            << dotted.substr(0, 500);
        EXPECT_LT(dotted.size(), 1000u) << parts;
    }
}

TEST(ScenarioLimits, DeepExpressionsAreAnErrorAtTheLimit) {
    // 'k = ' then the 65th '(' at column 4 + 65
    const std::string parens =
        load_error(write("parens.toml", with_ops(repeat("(", 100) + "k" + repeat(")", 100))));
    EXPECT_TRUE(has(parens, ":12:69: error: an expression nested more than 64 levels deep\n"))
        << parens;
    EXPECT_TRUE(has(parens, "note: assign inner parts to names on lines of their own")) << parens;
    EXPECT_TRUE(has(load_error(write("minus.toml", with_ops(repeat("-", 100) + "k"))),
                    ":12:69: error: an expression nested more than 64 levels deep"));
    const std::string calls = repeat("exp(", 70) + "k" + repeat(")", 70);
    EXPECT_TRUE(has(load_error(write("calls.toml", with_ops(calls))),
                    ":12:261: error: an expression nested more than 64 levels deep"));
    // at the limit itself the line is taken
    LoadOptions options;
    const std::string deepest = repeat("(", 64) + "k" + repeat(")", 64);
    EXPECT_EQ(load_file(write("parens_64.toml", with_ops(deepest)), test_catalog(), options).size(),
              1u);
}

TEST(ScenarioLimits, LongExpressionsAreAnErrorAtTheLimit) {
    std::string sum = "k";
    for (int i = 1; i < 600; ++i) sum += "+k";
    const std::string terms = load_error(write("sum.toml", with_ops(sum)));
    EXPECT_TRUE(has(terms, ":12:1005: error: an expression of 1199 tokens, more than 1000"))
        << terms;
    EXPECT_TRUE(has(terms, "note: split it over several lines, assigning its parts to names"));
    // at the limit itself the line is taken
    std::string longest = "k";
    for (int i = 1; i < 500; ++i) longest += "+k";
    LoadOptions options;
    EXPECT_EQ(load_file(write("sum_500.toml", with_ops(longest)), test_catalog(), options).size(),
              1u);
}

TEST(ScenarioLimits, DeepTablesAreAnErrorAtTheLimit) {
    // inside [shape], the 16th part of the key is the 17th level
    std::string key = "a";
    for (int i = 1; i < 100; ++i) key += ".a";
    const std::string what = load_error(write("dotted.toml", kHead + key + " = 1\n"));
    EXPECT_TRUE(has(what, "error: tables and arrays nested 17 levels deep, more than 16\n"))
        << what;
    EXPECT_TRUE(has(what, "note: a scenario needs a few levels")) << what;
}

TEST(ScenarioLimits, LongLinesAreAnErrorAndQuotedInAWindow) {
    const std::string line = "description = \"" + std::string(40000, 'x') + "\"";
    const std::string path = write("long_line.toml", kHead + line + "\n");
    const std::string what = load_error(path);
    EXPECT_TRUE(has(what, path + ":10:1: error: line 10 has 40016 bytes, more than the 16384 a "
                                 "line may have\n    description = \"xxx"))
        << what.substr(0, 500);
    EXPECT_LT(what.size(), 600u);
}

TEST(ScenarioLimits, LongArraysAreAnError) {
    std::string items;
    for (int i = 0; i < 5000; ++i) items += "  \"chunk\",\n";
    const std::string path = write("array.toml", kHead + "variants = [\n" + items + "]\n");
    const std::string what = load_error(path);
    EXPECT_TRUE(has(what, path +
                              ":10:12: error: an array of 5000 values, more than the 4096 an array "
                              "may hold"))
        << what.substr(0, 500);
}

TEST(ScenarioLimits, LargeFilesAreRefusedBeforeParsing) {
    const std::string path = write("large.toml", kHead + "# " + std::string(2 << 20, 'x') + "\n");
    const std::string what = load_error(path);
    EXPECT_EQ(what, path + ": error: the file has " + std::to_string(fs::file_size(path)) +
                        " bytes, more than the 1048576 a scenario file may have\nnote: split it "
                        "into several files");
}

TEST(ScenarioLimits, LongNamesAreAnError) {
    const std::string name = std::string(10000, 'a');
    std::string text = kHead;
    text.replace(text.find("limits"), 6, name);
    const std::string what = load_error(write("long_name.toml", text));
    EXPECT_TRUE(has(what, ":1:8: error: a name of 10000 characters, more than 128\n"))
        << what.substr(0, 500);
    EXPECT_LT(what.size(), 1000u);
}

TEST(ScenarioLimits, LongCaseIdsAreAnError) {
    // cu_seqlens of 600 offsets in [matrix]: an id of about 2,300 characters
    std::string offsets = "0";
    for (int i = 1; i < 600; ++i) offsets += "," + std::to_string(i);
    std::string text = kHead;
    text.replace(text.find("T = 16"), 6, "T = 599");
    text += "[matrix]\ncu_seqlens = [[" + offsets + "]]\n";
    const std::string what = load_error(write("long_id.toml", text));
    EXPECT_TRUE(has(what, "characters, more than 1024\n")) << what.substr(0, 500);
    EXPECT_TRUE(has(what, "note: shorten the [matrix] values")) << what.substr(0, 500);
}

TEST(ScenarioLimits, FifosAndDevicesAreRefusedWithoutReading) {
    const std::string fifo = scratch("fifo.toml");
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // a read would wait for a writer forever; the refusal must come first
    EXPECT_EQ(load_error(fifo), fifo + ": error: is a FIFO, not a scenario file");
    EXPECT_EQ(load_error("/dev/zero"),
              "/dev/zero: error: is a character device, not a scenario file");
    for (const std::string& path : {fifo, std::string("/dev/zero")}) {
        try {
            collect_files({path});
            ADD_FAILURE() << "no UsageError for " << path;
        } catch (const UsageError& e) {
            EXPECT_TRUE(has(e.what(), path + " is a ")) << e.what();
            EXPECT_TRUE(has(e.what(), ", not a regular file")) << e.what();
        }
    }
    // in a folder, only regular *.toml files are taken
    const std::string folder = fs::path(fifo).parent_path() / "with_fifo";
    fs::create_directories(folder);
    const std::string inner = folder + "/inner.toml";
    fs::remove(inner);
    ASSERT_EQ(mkfifo(inner.c_str(), 0600), 0);
    EXPECT_TRUE(collect_files({folder}).empty());
}

TEST(ScenarioLimits, AFileNamedTwiceIsTakenOnce) {
    const std::string file = write("twice/one.toml", "");
    const std::string folder = fs::path(file).parent_path().string();
    const std::string dotted = folder + "/./one.toml";
    EXPECT_EQ(collect_files({file, folder, dotted}), std::vector<std::string>{file});
}

TEST(ScenarioLimits, PrologueTensorsCountInTheMemoryEstimate) {
    // 2^27 elements: 2 GiB drawn in fp64 and rounded, under a 64 MiB limit
    const std::string text = kHead +
                             "[prologue]\nops = \"k = k + w\"\n"
                             "tensors.w = { shape = [512, 512, 512], dtype = \"fp32\" }\n";
    const std::string what = load_error(write("prologue_memory.toml", text), 64 << 20);
    EXPECT_TRUE(
        has(what, "error: case 'limits' needs about 2.0 GiB, more than --max-memory 64.0 MiB"))
        << what;
}

TEST(ScenarioLimits, ControlCharactersInValuesAreEscaped) {
    std::string text = kHead;
    text.replace(text.find("\"simple_gla\""), 12, "\"\\u001b[31mred\\u009b2J\"");
    const std::string what = load_error(write("escape.toml", text));
    EXPECT_TRUE(has(what, "error: unknown family '\\x1b[31mred\\u009b2J'")) << what;
    EXPECT_FALSE(has(what, "\x1b")) << what;
    EXPECT_FALSE(has(what, "\xc2\x9b")) << what;
    // a raw control character is a TOML error, and its line is quoted escaped
    std::string raw = kHead;
    raw.replace(raw.find("\"d\""), 3, "\"d\x1b[2J\"");
    const std::string quoted = load_error(write("raw_escape.toml", raw));
    EXPECT_TRUE(has(quoted, "    description = \"d\\x1b[2J\"")) << quoted;
    EXPECT_FALSE(has(quoted, "\x1b")) << quoted;
}

TEST(Diagnostics, LongLinesAreQuotedAroundTheColumn) {
    Diagnostic d;
    d.span = {{"f.toml", 1, 5001}, 3};
    d.message = "m";
    const std::string line = std::string(5000, 'a') + "bcd" + std::string(5000, 'e');
    const std::string window = std::string(60, 'a') + "bcd" + std::string(58, 'e');
    EXPECT_EQ(render_diagnostic(d, line), "f.toml:1:5001: error: m\n    …" + window + "…\n     " +
                                              std::string(60, ' ') + "^~~");
    // near the line's ends the window keeps its width of 121
    d.span = {{"f.toml", 1, 3}, 1};
    EXPECT_EQ(render_diagnostic(d, line),
              "f.toml:1:3: error: m\n    " + std::string(121, 'a') + "…\n      ^");
    d.span = {{"f.toml", 1, 10004}, 1};
    EXPECT_EQ(render_diagnostic(d, line), "f.toml:1:10004: error: m\n    …" +
                                              std::string(121, 'e') + "\n     " +
                                              std::string(121, ' ') + "^");
    // a line of 121 fits whole
    d.span = {{"f.toml", 1, 1}, 1};
    EXPECT_EQ(render_diagnostic(d, std::string(121, 'x')),
              "f.toml:1:1: error: m\n    " + std::string(121, 'x') + "\n    ^");
}

TEST(Diagnostics, ControlCharactersInTheLineAreEscapedUnderTheCaret) {
    Diagnostic d;
    d.span = {{"f.toml", 1, 7}, 1};
    d.message = "m";
    // ESC at column 5 prints as four characters, and the caret moves past them
    EXPECT_EQ(render_diagnostic(d, "a = \x1b[x"),
              "f.toml:1:7: error: m\n    a = \\x1b[x\n    " + std::string(9, ' ') + "^");
}

}  // namespace
}  // namespace lav::scenario
